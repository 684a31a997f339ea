"""nginx in front of three replicas, configured as nginx's gRPC documentation shows (listen ...
http2, grpc_pass grpc://upstream) with every other setting at its default, client_max_body_size
1m included (issue 18). Every phrase of the recording must arrive exactly once, in order."""
import os
import threading
import time

import proxytools as pt

# The binding pushes the ~87 s recording at PUSH_SPEED times real time (~58 s), and the reload or
# quit comes ACT_AT_S into the push. nginx's old worker sends GOAWAY (NO_ERROR, last-stream-id
# the running stream) at once, then serves that stream for as long as it lasts (no
# worker_shutdown_timeout by default). The old processes must be gone within DRAIN_LIMIT_S of the
# signal while the client still streams: the library's GOAWAY drain (default 10 s) moves the
# stream off them. Without it, here the old worker keeps the stream until nginx's own 1 MB body
# cap resets it (~33 s of audio from the stream's start: ~18 s after the signal at this pace);
# with client_max_body_size 0, until the client is done.
ACT_AT_S = 4.0
PUSH_SPEED = 1.5
DRAIN_LIMIT_S = 15.0


def _assert_all_delivered(scenario, run, extra_log="", **figures):
    result = pt.count_delivered(run.transcripts)
    pt.report(scenario, result, run.error_texts(), **figures)
    assert result["delivered"] == len(pt.PHRASES) and not result["extra"], \
        pt.explain(result, run.error_texts(), extra_log)


def _watch_exit(alive, since, into, key):
    """Records in into[key] the seconds from `since` until alive() is false."""
    def watch():
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if not alive():
                into[key] = time.monotonic() - since
                return
            time.sleep(0.1)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def _any_alive(pids):
    """For nginx's workers (children of its master, which reaps them)."""
    def alive():
        for p in pids:
            try:
                os.kill(p, 0)
                return True
            except ProcessLookupError:
                pass
        return False
    return alive


def test_a_file_through_nginx(live_replicas, recording, tmp_path):
    """(a) The demo transcribes the ~87 s recording (--file) through nginx."""
    wav, _ = recording
    nginx = pt.Nginx(tmp_path / "nginx", pt.free_port(), live_replicas.addresses)
    try:
        run = pt.run_demo(nginx.url, wav, tmp_path / "cache", timeout=150)
    finally:
        nginx.stop()
    _assert_all_delivered("nginx-file", run, nginx.error_log(), seconds=f"{run.elapsed:.1f}")


def test_a_file_through_nginx_closing_connections_after_two_requests(live_replicas, recording, tmp_path):
    """nginx ends a client connection after `keepalive_requests` streams (1000 by default: a
    long-lived client meets it after 1000 contexts or stream rotations) with a GOAWAY whose
    last-stream-id is the stream it just took. Set to 2, every connection carries the login or a
    stream and one more, so the ~87 s file crosses several GOAWAYs: nothing lost or repeated."""
    wav, _ = recording
    nginx = pt.Nginx(tmp_path / "nginx", pt.free_port(), live_replicas.addresses, extra_http="keepalive_requests 2;")
    try:
        run = pt.run_demo(nginx.url, wav, tmp_path / "cache", timeout=150, extra=("--verbose",))
    finally:
        nginx.stop()
    goaways = run.stderr.count("the connection is closing (GOAWAY)")
    _assert_all_delivered("nginx-keepalive-requests-2", run, nginx.error_log(), seconds=f"{run.elapsed:.1f}",
                          goaways_mid_context=goaways)
    assert goaways >= 1, "no GOAWAY met mid-context: the scenario tested nothing"


def test_b_reload_mid_stream(live_replicas, recording, tmp_path):
    """(b) `nginx -s reload` while the binding pushes the recording: the old worker finishes
    gracefully (GOAWAY to the client), a new one takes new connections."""
    wav, _ = recording
    nginx = pt.Nginx(tmp_path / "nginx", pt.free_port(), live_replicas.addresses)
    done, gone = {}, {}
    old_workers = nginx.worker_pids()
    assert old_workers

    def act(t):
        if t >= ACT_AT_S and "reloaded" not in done:
            done["reloaded"] = time.monotonic()
            nginx.signal("reload")
            done["watch"] = _watch_exit(_any_alive(old_workers), done["reloaded"], gone, "old_worker_exit_s")

    try:
        run = pt.run_push(nginx.url, pt.read_pcm(wav), tmp_path / "cache", speed=PUSH_SPEED, on_time=act)
        streamed_after = time.monotonic() - done["reloaded"]
        done["watch"].join(timeout=max(0.0, DRAIN_LIMIT_S - streamed_after))
    finally:
        nginx.stop()
    exit_s = gone.get("old_worker_exit_s")
    _assert_all_delivered("nginx-reload", run, nginx.error_log(), seconds=f"{run.elapsed:.1f}",
                          old_worker_exit_s=f"{exit_s:.1f}" if exit_s is not None else "none",
                          stream_after_reload_s=f"{streamed_after:.1f}")
    assert exit_s is not None and exit_s <= DRAIN_LIMIT_S, \
        f"the old nginx worker was still serving {DRAIN_LIMIT_S:.0f} s after the reload (exit: {exit_s})"


def test_c_quit_mid_stream_and_a_new_nginx(live_replicas, recording, tmp_path):
    """(c) `nginx -s quit` while the binding pushes the recording, and 0.5 s later a new nginx
    (its own prefix dir) on the same port: the client must move to it."""
    wav, _ = recording
    port = pt.free_port()
    proxies = [pt.Nginx(tmp_path / "nginx-1", port, live_replicas.addresses)]
    done, gone = {}, {}

    def successor():
        time.sleep(0.5)
        try:
            proxies.append(pt.Nginx(tmp_path / "nginx-2", port, live_replicas.addresses))
        except RuntimeError as e:  # reported by the assertion below
            done["successor_failed"] = str(e)

    def act(t):
        if t >= ACT_AT_S and "quit" not in done:
            done["quit"] = time.monotonic()
            proxies[0].signal("quit")
            old = proxies[0].proc
            done["watch"] = _watch_exit(lambda: old.poll() is None, done["quit"], gone, "old_nginx_exit_s")
            done["successor"] = threading.Thread(target=successor, daemon=True)
            done["successor"].start()

    try:
        run = pt.run_push(proxies[0].url, pt.read_pcm(wav), tmp_path / "cache", speed=PUSH_SPEED, on_time=act)
        streamed_after = time.monotonic() - done["quit"]
        done["successor"].join(timeout=10)
        done["watch"].join(timeout=max(0.0, DRAIN_LIMIT_S - streamed_after))
    finally:
        for p in proxies:
            p.stop()
    assert "successor_failed" not in done, done["successor_failed"]
    exit_s = gone.get("old_nginx_exit_s")
    logs = "\n".join(p.error_log()[-1500:] for p in proxies)
    _assert_all_delivered("nginx-quit", run, logs, seconds=f"{run.elapsed:.1f}",
                          old_nginx_exit_s=f"{exit_s:.1f}" if exit_s is not None else "none",
                          stream_after_quit_s=f"{streamed_after:.1f}")
    assert exit_s is not None and exit_s <= DRAIN_LIMIT_S, \
        f"the old nginx was still serving {DRAIN_LIMIT_S:.0f} s after `nginx -s quit` (exit: {exit_s})"


# (f) Every replica down while the application pushes OUTAGE_AUDIO_S of audio and more while they
# start again: the library keeps it (a 120 s replay buffer) and, once they are back, replays it. That is more audio than
# one stream may carry through nginx's 1 MB body cap (the 900 KB budget is about 28 s), so the
# replay must go out on several streams: on one it was answered 413 and the context failed.
OUTAGE_AT_S = 0.5      # wall seconds into the push (4 s of audio at OUTAGE_PUSH_SPEED)
OUTAGE_AUDIO_S = 40.0  # audio pushed while every replica is down
OUTAGE_PUSH_SPEED = 8.0


def test_f_every_replica_down_for_more_audio_than_a_stream_carries(live_replicas, recording, tmp_path):
    """(f) The binding pushes the recording at 8x; 0.5 s in, every replica gets SIGKILL; 40 s of
    audio later (5 s) they are started again, which takes seconds more. Nothing may be lost or
    refused."""
    wav, _ = recording
    nginx = pt.Nginx(tmp_path / "nginx", pt.free_port(), live_replicas.addresses)
    done = {}

    def act(t):
        if t >= OUTAGE_AT_S and "down" not in done:
            for i in range(len(live_replicas.servers)):
                live_replicas.kill(i)
            done["down"] = time.monotonic()
        elif "down" in done and "restart" not in done and t >= OUTAGE_AT_S + OUTAGE_AUDIO_S / OUTAGE_PUSH_SPEED:
            def restart():  # beside the push, which goes on meanwhile (the replicas take 1-3 s)
                for i in range(len(live_replicas.servers)):
                    live_replicas.restart(i)
                done["up"] = time.monotonic()
            done["restart"] = threading.Thread(target=restart, daemon=True)
            done["restart"].start()

    try:
        run = pt.run_push(nginx.url, pt.read_pcm(wav), tmp_path / "cache", speed=OUTAGE_PUSH_SPEED, on_time=act,
                          replay_buffer_ms=120_000, reconnect=(None, 200, 1000), timeout=120)
        if "restart" in done:
            done["restart"].join(timeout=30)
    finally:
        nginx.stop()
    access = (nginx.prefix / "logs" / "access.log").read_text(errors="replace")
    refused = sum(1 for line in access.splitlines() if '" 413 ' in line)
    assert "up" in done, "the push ended before the replicas were started again"
    _assert_all_delivered("nginx-outage", run, nginx.error_log() + "\n" + "\n".join(run.logs[-30:]),
                          seconds=f"{run.elapsed:.1f}", outage_s=f"{done['up'] - done['down']:.1f}",
                          status_413=refused, streams=sum(1 for line in access.splitlines() if "SLU/Stream" in line))
    assert refused == 0, f"nginx refused {refused} stream(s) as too large (413)"
    assert any("longer than a stream's budget" in line for line in run.logs), \
        "no replay was split across streams: the outage did not test what it is for\n" + "\n".join(run.logs[-30:])
