"""The library's Wyoming backend against the real wyoming-faster-whisper (issue 20): the C demo
with `--url wyoming://...` on espeak-ng speech, compared with the suite's own Wyoming client on the
same audio; a Unix socket; the server killed mid-utterance and restarted (reconnect with replay,
nothing lost); a long recording cut into segments by stream rotation."""
import json
import subprocess
import threading
import time

import wyomingtools as wt
from speechtools import DEMO
from test_wyoming_peers import SENTENCES, WER_BOUND


def demo(url, wav, *more, timeout=120):
    out = subprocess.run([str(DEMO), "--url", url, "--file", str(wav), "--json", *more],
                         capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return out, events


def finals(events):
    return [e for e in events if e["type"] == "segment" and e["final"]]


def test_the_demo_transcribes_through_wyoming_as_well_as_a_direct_client(asr, speech):
    errors = direct_errors = words = 0
    for text in SENTENCES:
        out, events = demo(asr.url, speech(text))
        assert out.returncode == 0, out.stderr
        got = finals(events)
        # One final update per transcript (no partials from this server), no word times.
        assert len(got) == 1 and [e for e in events if e["type"] == "segment"] == got, events
        assert all(w["start_ms"] == -1 and w["end_ms"] == -1 and w["final"] for w in got[0]["words"])
        assert [e["type"] for e in events if e["type"] != "state"] == ["start", "segment", "stop"]
        direct = wt.transcribe_with_wyoming(asr.url, speech(text)).text
        ref = wt.normalize_words(text)
        errors += wt.word_errors(ref, wt.normalize_words(got[0]["transcript"]))
        direct_errors += wt.word_errors(ref, wt.normalize_words(direct))
        words += len(ref)
    print(f"\nfigure: WER through the library {errors / words:.1%}, direct client {direct_errors / words:.1%} "
          f"({words} words)")
    assert errors / words <= WER_BOUND
    assert errors <= direct_errors + 1


def test_a_unix_socket(asr_unix, speech):
    out, events = demo(asr_unix.url, speech(SENTENCES[0]))
    assert out.returncode == 0, out.stderr
    assert wt.normalize_words(finals(events)[0]["transcript"]) == SENTENCES[0].split()


def test_ready_only_after_the_server_answered(speech, tmp_path):
    """Nothing listening: the client never says ready; it reports the failure naming the URL."""
    port = wt.free_port()
    out, events = demo(f"wyoming://127.0.0.1:{port}", speech(SENTENCES[0]), "--reconnect", "0")
    assert out.returncode != 0
    assert not any(e.get("state") == "ready" for e in events), events
    assert f"127.0.0.1:{port}" in out.stdout + out.stderr


def test_a_server_killed_mid_utterance_and_restarted_loses_nothing(speech, tmp_path):
    """SIGKILL while the context is open (audio sent, transcript awaited), a new server on the same
    port 1.5 s later: the library reconnects and sends the unfinished audio again."""
    text = " ".join(SENTENCES[:4])
    wav = speech(text)
    server = wt.WyomingASR()
    try:
        proc = subprocess.Popen([str(DEMO), "--url", server.url, "--file", str(wav), "--json", "--verbose"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        started = threading.Event()

        def read():
            for line in proc.stdout:
                lines.append(line)
                if '"type":"start"' in line:
                    started.set()
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert started.wait(30), "no context started"
        server.kill()
        time.sleep(1.5)
        server.restart()
        proc.wait(timeout=120)
        reader.join(10)
        err = proc.stderr.read()
    finally:
        server.stop()
    events = [json.loads(line) for line in lines if line.strip()]
    assert proc.returncode == 0, err[-2000:]
    assert not any(e["type"] == "error" for e in events), events
    got = " ".join(e["transcript"] for e in finals(events))
    ref = wt.normalize_words(text)
    wer = wt.word_errors(ref, wt.normalize_words(got)) / len(ref)
    print(f"\nfigure: killed and restarted mid-utterance: WER {wer:.1%}, {len(finals(events))} finals")
    assert "reconnect" in err.lower() or "connection" in err.lower(), err[-2000:]
    assert wer <= WER_BOUND, got


def test_a_long_file_is_cut_into_segments_at_pauses(asr, speech, tmp_path):
    """Wyoming has one transcript per stream; a long context is rotated to a new stream at a pause
    once half the stream budget is used, so a long file comes back in segments as it is read.
    The sentences are said one by one with 0.4 s between them (espeak-ng reading them as one text
    leaves no pause of even 200 ms, and the rotation then cuts where the budget ends)."""
    text = " ".join(SENTENCES * 3)
    padded = []
    for i, sentence in enumerate(SENTENCES * 3):
        part = tmp_path / f"p{i}.wav"
        subprocess.run(["sox", "-R", str(speech(sentence)), str(part), "pad", "0", "0.4"], check=True)
        padded.append(str(part))
    wav = tmp_path / "long.wav"
    subprocess.run(["sox", "-R", *padded, str(wav)], check=True)
    out, events = demo(asr.url, wav, "--stream-budget", "300000", "--verbose")
    cuts = [line for line in out.stderr.splitlines() if "continues on a new stream" in line]
    assert cuts and all("at a pause" in c for c in cuts), cuts
    assert out.returncode == 0, out.stderr
    got = finals(events)
    assert len(got) >= 3, events
    assert len({e["context_id"] for e in got}) == 1
    assert [e["segment_id"] for e in got] == list(range(len(got)))
    ref = wt.normalize_words(text)
    wer = wt.word_errors(ref, wt.normalize_words(" ".join(e["transcript"] for e in got))) / len(ref)
    print(f"\nfigure: {len(ref)} words in {len(got)} segments, WER {wer:.1%}")
    assert wer <= WER_BOUND


def test_hands_free_makes_one_transcription_per_utterance(asr, speech, tmp_path):
    """--hands-free (the library's voice detector opens a context on speech and ends it at a
    pause): two utterances 1.5 s apart are two contexts, each one Wyoming transcription."""
    first, second = SENTENCES[0], SENTENCES[6]
    padded = tmp_path / "first.wav"
    subprocess.run(["sox", "-R", str(speech(first)), str(padded), "pad", "1", "1.5"], check=True)
    wav = tmp_path / "two.wav"
    subprocess.run(["sox", "-R", str(padded), str(speech(second)), str(wav), "pad", "0", "2"], check=True)
    out, events = demo(asr.url, wav, "--hands-free")
    assert out.returncode == 0, out.stderr
    got = finals(events)
    assert len({e["context_id"] for e in got}) == 2, events
    assert [wt.normalize_words(e["transcript"]) for e in got] == [first.split(), second.split()]
