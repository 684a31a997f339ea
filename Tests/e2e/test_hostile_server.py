"""A hostile Speechly server cannot exhaust the client (issue 23): memory is bounded in bytes, not
only in counts. Tests/peers/hostile_slu_server.py sends, for one segment it never ends, words of
3 MB, or 16,383 one-byte words, or 400 segments of 60 KB; the demo must end with an error naming
the limit, quickly, with its peak memory small (0.4.1 reached 665 MB after 30 s on the first and
kept growing)."""
import subprocess
import threading
import time

import pytest

from speechtools import DEMO, hostile_server



@pytest.mark.parametrize("scenario, named", [
    ("HugeWords", "over the 1024-byte limit"),
    ("ManySmallWords", "over the 64 KiB limit"),
    ("ManySegments", "over the 1 MiB limit"),
])
def test_a_hostile_server_is_a_named_error_with_bounded_memory(scenario, named, speech, tmp_path):
    with hostile_server(scenario) as url:
        wav = speech("stop the music")
        began = time.monotonic()
        demo = subprocess.Popen([str(DEMO), "--url", url, "--app-id", "e2e", "--file", str(wav),
                                 "--cache-dir", str(tmp_path / "cache")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        peak = watch_peak_kb(demo.pid)
        _, stderr = demo.communicate(timeout=60)
        took = time.monotonic() - began
    peak_mb = peak[0] / 1024
    print(f"\n{scenario}: {took:.2f} s, peak resident {peak_mb:.1f} MB: {stderr.strip()[:160]}")
    assert demo.returncode == 1
    assert "malformed response" in stderr and named in stderr, stderr
    assert 0 < peak_mb < 64
    assert took < 30


def watch_peak_kb(pid):
    """The process's VmHWM (peak resident set, KB), read every 5 ms while it lives: the last
    reading is its peak, give or take the last few milliseconds."""
    peak = [0]

    def watch():
        while True:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak[0] = max(peak[0], int(line.split()[1]))
            except (FileNotFoundError, ProcessLookupError, ValueError):
                return
            time.sleep(0.005)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return peak


def run_scenario(scenario, wav, tmp_path):
    with hostile_server(scenario) as url:
        return subprocess.run([str(DEMO), "--url", url, "--app-id", "e2e", "--file", str(wav),
                               "--json", "--cache-dir", str(tmp_path / "cache")],
                              capture_output=True, text=True, timeout=60)


def test_nul_bytes_in_words_are_replaced_not_cut(speech, tmp_path):
    """Issue 23 item 3: a NUL inside a word reached C callers, where the char * text ends there
    ("kit"). It is replaced by U+FFFD, so the whole word and transcript arrive."""
    import json
    out = run_scenario("NulWord", speech("turn on the kitchen lights"), tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    events = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    finals = [e for e in events if e["type"] == "segment" and e["final"]]
    assert [w["text"] for w in finals[0]["words"]] == ["turn", "on", "the", "kit\ufffdchen", "lights\ufffd"], finals
    assert finals[0]["transcript"] == "turn on the kit\ufffdchen lights\ufffd", finals


def test_responses_of_an_unknown_kind_end_nothing(speech, tmp_path):
    """A real grpcio server sending responses of a kind the client does not know (a payload in a
    field it has no name for), naming no audio context, before `started` and between the words:
    they ended the stream ("a result before the stream's context started") and the words with
    it; now they are ignored and the final segment arrives."""
    import json
    out = run_scenario("UnknownKinds", speech("hello there"), tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    events = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    finals = [e for e in events if e["type"] == "segment" and e["final"]]
    assert [f["transcript"] for f in finals] == ["hello there"], events
    assert not [e for e in events if e["type"] == "error"], events


def test_a_result_for_another_context_is_a_protocol_error(speech, tmp_path):
    """Issue 23 item 3: a result for an audio_context the stream does not carry was filed under
    the current context; now it ends the stream with an error naming it."""
    import json
    out = run_scenario("OtherContext", speech("stop the music"), tmp_path)
    assert out.returncode == 1
    errors = [json.loads(l) for l in out.stdout.splitlines() if '"type":"error"' in l]
    assert errors and errors[0]["code"] == "malformed response", out.stdout
    assert "audio context 'someone-else' on the stream of context 'hostile-1'" in errors[0]["message"], errors
    assert not [l for l in out.stdout.splitlines() if '"hello"' in l], out.stdout
