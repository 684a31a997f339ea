"""HAProxy 2.6 in front of three replicas, HTTP/2 on both sides (bind ... proto h2, server ...
proto h2), round robin with health checks (issue 18). Every phrase of the recording must
arrive exactly once, in order."""
import os
import re
import signal
import time
import threading

import proxytools as pt

KILL_AT_FINAL = 8   # the replica serving the stream is killed when the 8th phrase came back


def _stream_log(haproxy):
    """HAProxy's log lines of the SLU streams (one per request: status, bytes, termination state)."""
    return [line for line in haproxy.lines if "SLU/Stream" in line]


def _termination_states(lines):
    # httplog: ... <status> <bytes> - - <termination state> <conns> <queue> {...} "<request>"
    return [m.group(1) for m in (re.search(r" - - (\S{4}) ", line) for line in lines) if m]


def test_d_replica_killed_mid_file_and_restarted(live_replicas, recording, tmp_path):
    """(d) The demo transcribes the recording (--file) through HAProxy; when the 8th phrase came
    back, the replica receiving the audio gets SIGKILL and is started again on its port."""
    wav, _ = recording
    haproxy = pt.HAProxy(tmp_path / "haproxy", pt.free_port(), live_replicas.addresses)
    before = live_replicas.received_bytes()
    done = {}

    def act(count):
        if count == KILL_AT_FINAL and "killed" not in done:
            done["killed"] = i = live_replicas.serving(before)
            live_replicas.kill(i)
            done["restart"] = threading.Thread(target=live_replicas.restart, args=(i,), daemon=True)
            done["restart"].start()

    try:
        run = pt.run_demo(haproxy.url, wav, tmp_path / "cache", on_final=act, timeout=150)
        if "restart" in done:
            done["restart"].join(timeout=30)
    finally:
        haproxy.stop()
    streams = _stream_log(haproxy)
    result = pt.count_delivered(run.transcripts)
    pt.report("haproxy-kill", result, run.error_texts(), seconds=f"{run.elapsed:.1f}",
              killed=f"replica{done['killed'] + 1}" if "killed" in done else "none",
              haproxy_states=",".join(_termination_states(streams)) or "none")
    assert "killed" in done, "the 8th phrase never came back: no replica was killed\n" + \
        pt.explain(result, run.error_texts(), haproxy.log)
    assert live_replicas.alive(done["killed"]), "the killed replica did not come back"
    assert result["delivered"] == len(pt.PHRASES) and not result["extra"], \
        pt.explain(result, run.error_texts(), haproxy.log)


def _timeout_report(scenario, run, haproxy):
    streams = _stream_log(haproxy)
    result = pt.count_delivered(run.transcripts)
    pt.report(scenario, result, run.error_texts(), seconds=f"{run.elapsed:.1f}",
              reconnects=sum(1 for s in run.states if s.state.name == "RECONNECTING"),
              haproxy_states=",".join(_termination_states(streams)) or "none")
    assert result["delivered"] == len(pt.PHRASES) and not result["extra"], \
        pt.explain(result, run.error_texts(), haproxy.log + "\nclient log:\n" + "\n".join(run.logs[-40:]))


def test_e_server_timeout_shorter_than_a_pause(live_replicas, recording_with_gap, tmp_path):
    """(e) `timeout server 5s`, and the recording with 12 s of silence after the twelfth phrase
    pushed at real time through the binding, the silence too, as a microphone's would be."""
    wav, _ = recording_with_gap
    haproxy = pt.HAProxy(tmp_path / "haproxy", pt.free_port(), live_replicas.addresses, timeout_server="5s")
    try:
        run = pt.run_push(haproxy.url, pt.read_pcm(wav), tmp_path / "cache", speed=1.0)
    finally:
        haproxy.stop()
    _timeout_report("haproxy-timeout-server", run, haproxy)


def test_e_server_timeout_shorter_than_a_pause_without_audio(live_replicas, recording, tmp_path):
    """(e, second form) `timeout server 5s`, and a pause of 12 s in which the application pushes
    nothing (a source that stalls, or one that gates its audio), the context open: nothing goes
    either way on the stream. The twelve phrases before and after it are pushed at 3 times real
    time to keep the run short (the pause is what matters here)."""
    wav, _ = recording
    pcm = pt.read_pcm(wav)
    cut = pt.pause_after_phrase(pcm, 11)
    haproxy = pt.HAProxy(tmp_path / "haproxy", pt.free_port(), live_replicas.addresses, timeout_server="5s")
    try:
        run = pt.run_push(haproxy.url, [pcm[:cut], 12.0, pcm[cut:]], tmp_path / "cache", speed=3.0)
    finally:
        haproxy.stop()
    _timeout_report("haproxy-timeout-server-no-audio", run, haproxy)


FREEZE_AT_S = 20.0   # into the push: several phrases are final by then


def test_h_replica_frozen_mid_stream(live_replicas, recording, tmp_path):
    """(h) The binding pushes the recording at real time through HAProxy (Debian's timeouts:
    server 50 s); 20 s in, the replica receiving the audio is frozen (SIGSTOP: a hung process,
    its kernel still taking connections, so HAProxy's health checks pass and its PINGs are
    HAProxy's own), and is thawed only after the push. A live source cannot wait: the replay
    buffer (30 s) must still hold the audio the frozen replica never answered when the stream
    is given up on."""
    wav, _ = recording
    haproxy = pt.HAProxy(tmp_path / "haproxy", pt.free_port(), live_replicas.addresses)
    before = live_replicas.received_bytes()
    done = {}

    def act(t):
        if t >= FREEZE_AT_S and "frozen" not in done:
            done["frozen"] = i = live_replicas.serving(before)
            done["at"] = time.monotonic()
            os.kill(live_replicas.pid(i), signal.SIGSTOP)

    try:
        run = pt.run_push(haproxy.url, pt.read_pcm(wav), tmp_path / "cache", speed=1.0, on_time=act, timeout=90)
    finally:
        if "frozen" in done:
            os.kill(live_replicas.pid(done["frozen"]), signal.SIGCONT)
        haproxy.stop()
    streams = _stream_log(haproxy)
    result = pt.count_delivered(run.transcripts)
    # The log's times count from the client's creation, as the push does (within milliseconds).
    hung = [float(line.split()[0]) for line in run.logs if "taken as hung" in line]
    pt.report("haproxy-freeze", result, run.error_texts(), seconds=f"{run.elapsed:.1f}",
              frozen=f"replica{done['frozen'] + 1}" if "frozen" in done else "none",
              hung_found_at_s=",".join(f"{t:.1f}" for t in hung) or "none",
              reconnects=sum(1 for s in run.states if s.state.name == "RECONNECTING"),
              haproxy_states=",".join(_termination_states(streams)) or "none")
    assert "frozen" in done
    assert result["delivered"] == len(pt.PHRASES) and not result["extra"], \
        pt.explain(result, run.error_texts(), haproxy.log + "\nclient log:\n" + "\n".join(run.logs[-60:]))


EARLY_FREEZE_AT_S = 6.0      # into the push: the first phrases have been answered
LONG_STREAM_BUDGET = 2_000_000  # bytes: 62 s of audio, so a stream moves at a pause from 31 s


def test_i_replica_frozen_early_in_a_long_stream(live_replicas, recording, tmp_path):
    """(i) As (h), but the replica freezes 6 s into a stream that would run for 31 s and more
    (a stream budget raised to 62 s, as for a server without a proxy's limits): the stream is
    stopped only at its first pause past half the budget, 10 s more pass before a silent stopped
    stream is taken as hung, and by then the 30 s replay buffer no longer holds the audio from
    the freeze on. A live stream whose server answered as it heard and then went quiet is
    stopped to find out, while the buffer still holds that audio."""
    wav, _ = recording
    haproxy = pt.HAProxy(tmp_path / "haproxy", pt.free_port(), live_replicas.addresses)
    before = live_replicas.received_bytes()
    done = {}

    def act(t):
        if t >= EARLY_FREEZE_AT_S and "frozen" not in done:
            done["frozen"] = i = live_replicas.serving(before)
            os.kill(live_replicas.pid(i), signal.SIGSTOP)

    try:
        run = pt.run_push(haproxy.url, pt.read_pcm(wav), tmp_path / "cache", speed=1.0, on_time=act, timeout=90,
                          stream_budget=LONG_STREAM_BUDGET)
    finally:
        if "frozen" in done:
            os.kill(live_replicas.pid(done["frozen"]), signal.SIGCONT)
        haproxy.stop()
    result = pt.count_delivered(run.transcripts)
    quiet = [float(line.split()[0]) for line in run.logs
             if "said nothing on the stream for the start timeout" in line and "moves to a new stream" in line]
    hung = [float(line.split()[0]) for line in run.logs if "taken as hung" in line]
    pt.report("haproxy-freeze-early", result, run.error_texts(), seconds=f"{run.elapsed:.1f}",
              frozen=f"replica{done['frozen'] + 1}" if "frozen" in done else "none",
              quiet_stop_at_s=",".join(f"{t:.1f}" for t in quiet) or "none",
              hung_found_at_s=",".join(f"{t:.1f}" for t in hung) or "none",
              reconnects=sum(1 for s in run.states if s.state.name == "RECONNECTING"))
    assert "frozen" in done
    assert result["delivered"] == len(pt.PHRASES) and not result["extra"], \
        pt.explain(result, run.error_texts(), haproxy.log + "\nclient log:\n" + "\n".join(run.logs[-60:]))
    # Found by the probe: the quiet stream stopped first, then taken as hung.
    assert quiet and hung and quiet[0] < hung[0], (quiet, hung, run.logs[-60:])
