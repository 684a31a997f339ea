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


def _every_utterance_once(got, sentences, what):
    """Every sentence came back, none twice: at least a final per utterance (a move at a pause
    inside one may split it in two, its words whole) and the word error rate within bounds."""
    ref = wt.normalize_words(" ".join(sentences))
    hyp = wt.normalize_words(" ".join(e["transcript"] for e in got))
    wer = wt.word_errors(ref, hyp) / len(ref)
    print(f"\nfigure: {what}: {len(got)} finals for {len(sentences)} utterances, WER {wer:.1%}")
    assert len(sentences) <= len(got) <= 2 * len(sentences), [e["transcript"] for e in got]
    assert len({e["context_id"] for e in got}) == 1
    assert [e["segment_id"] for e in got] == list(range(len(got)))
    assert wer <= WER_BOUND, [e["transcript"] for e in got]


def test_a_server_that_ends_utterances_by_itself_loses_none_of_a_file(vad_asr, speech, tmp_path):
    """A server with its own endpointing (the real wyoming library and faster-whisper behind an
    endpointer: Tests/peers/wyoming_vad_asr.py) sends a transcript at each end of speech. A file
    goes out far ahead of it, so all eight come after the stream's audio-stop; each is a final
    segment, and the stream ends at the server's answer to the describe sent after the first
    (the server handles events in order). Before, the first transcript ended the stream and
    the context: one sentence of eight."""
    wav = wt.concat_wavs([speech(s) for s in SENTENCES], tmp_path / "eight.wav", gap_s=1.2)
    started = time.monotonic()
    out, events = demo(vad_asr.url, wav, "--verbose")
    took = time.monotonic() - started
    assert out.returncode == 0, out.stderr[-3000:]
    assert "timeout" not in out.stderr.lower() and "reconnect" not in out.stderr.lower(), out.stderr[-3000:]
    _every_utterance_once(finals(events), SENTENCES, f"a file through a server that endpoints, {took:.1f} s")


def _live(url, wav, pace):
    """The demo fed `wav` as raw PCM on a pipe, 100 ms every `pace` s (a microphone at 0.1/pace
    times real time); its stderr (--verbose) and its events."""
    pcm, rate, width, channels = wt.read_wav(wav)
    proc = subprocess.Popen([str(DEMO), "--url", url, "--file", "-", "--raw", "16000", "--json", "--verbose"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    step = 3200
    for at in range(0, len(pcm), step):
        proc.stdin.write(pcm[at:at + step])
        proc.stdin.flush()
        time.sleep(pace)
    proc.stdin.close()
    out = proc.stdout.read().decode()
    assert proc.wait(timeout=120) == 0
    reader.join(10)
    stderr = b"".join(err).decode(errors="replace")
    return stderr, [json.loads(line) for line in out.splitlines() if line.strip()]


def test_wyoming_faster_whisper_with_its_own_endpointing_at_real_time(asr_endpointing, speech, tmp_path):
    """The real wyoming-faster-whisper with --vad-endpointing 0.5 (Silero VAD ends the
    utterance; one transcript per connection, then audio-stop closes it), fed as a microphone
    at real time, three sentences 1.5 s apart: each transcript comes in the pause after its
    sentence, the context moves to a new stream there, and each stream's end (the server
    closing at audio-stop, no second transcript) is its finish, not a loss to replay. Before,
    the first transcript ended the context: one sentence of three."""
    sentences = [SENTENCES[0], SENTENCES[3], SENTENCES[6]]
    wav = wt.concat_wavs([speech(s) for s in sentences], tmp_path / "three.wav", gap_s=1.5)
    assert asr_endpointing.info["asr"][0].get("requires_external_vad") is False, asr_endpointing.info
    stderr, events = _live(asr_endpointing.url, wav, 0.1)
    moves = [line for line in stderr.splitlines() if "continues on a new stream" in line]
    print(f"\nfigure: {len(moves)} moves at the server's ends of speech")
    assert "timeout" not in stderr.lower() and "reconnect" not in stderr.lower(), stderr[-3000:]
    assert not [e for e in events if e["type"] == "error"], events
    _every_utterance_once(finals(events), sentences, "wyoming-faster-whisper --vad-endpointing, live at real time")


def test_a_server_that_ends_utterances_by_itself_loses_none_of_live_audio(vad_asr, speech, tmp_path):
    """The same server with audio as a microphone brings it (a raw pipe at twice real time):
    each transcript comes while the audio goes on, and the context moves to a new stream at the
    next pause, so that every utterance is one stream's and none is cut or sent twice."""
    sentences = SENTENCES[:4]
    wav = wt.concat_wavs([speech(s) for s in sentences], tmp_path / "four.wav", gap_s=1.2)
    stderr, events = _live(vad_asr.url, wav, 0.05)
    moves = [line for line in stderr.splitlines() if "continues on a new stream" in line]
    print(f"\nfigure: {len(moves)} moves after the server's ends of speech: {moves}")
    assert moves and all("the server ended an utterance" in m for m in moves), stderr[-3000:]
    assert "timeout" not in stderr.lower() and "reconnect" not in stderr.lower(), stderr[-3000:]
    _every_utterance_once(finals(events), sentences, "live audio through a server that endpoints")


def test_a_server_that_ends_utterances_by_itself_lost_after_a_transcript_repeats_none(speech, tmp_path):
    """The same server, its connection reset right after its first transcript, while the
    stream still takes the audio (a server lost): the stream is replayed on a new connection
    from the pause that ended the utterance it had transcribed, not from its start (Wyoming
    words have no times: the whole stream was replayed, and that utterance came twice)."""
    server = wt.WyomingVadASR(extra_args=["--drop-after-transcripts", "1"])
    try:
        sentences = SENTENCES[:6]
        wav = wt.concat_wavs([speech(s) for s in sentences], tmp_path / "six.wav", gap_s=1.2)
        stderr, events = _live(server.url, wav, 0.05)
        peer_log = server.log_text()
    finally:
        server.stop()
    assert "dropping the connection after transcript 1" in peer_log, peer_log[-3000:]
    assert "reconnect" in stderr.lower(), stderr[-3000:] + peer_log[-3000:]
    assert not [e for e in events if e["type"] == "error"], events
    got = finals(events)
    ref = wt.normalize_words(" ".join(sentences))
    hyp = wt.normalize_words(" ".join(e["transcript"] for e in got))
    print(f"\nfigure: a server lost after its first transcript: {len(hyp)} words for {len(ref)}")
    assert len(hyp) <= len(ref) + 3, [e["transcript"] for e in got]
    _every_utterance_once(got, sentences, "live audio through a server that endpoints, lost after a transcript")


def test_a_file_to_wyoming_faster_whisper_with_its_own_endpointing_is_read_at_real_time(asr_endpointing, speech, tmp_path):
    """A file to the same server: its info says it ends utterances by itself, so the library
    reads the file at real time (sent ahead, everything after the first sentence went out
    before the server's end of speech, and it ignores what follows it on the connection: one
    sentence of three came back, with no error)."""
    sentences = [SENTENCES[1], SENTENCES[5], SENTENCES[7]]
    wav = wt.concat_wavs([speech(s) for s in sentences], tmp_path / "three.wav", gap_s=1.5)
    seconds = len(wt.read_wav(wav)[0]) / 32000
    started = time.monotonic()
    out, events = demo(asr_endpointing.url, wav, "--verbose")
    took = time.monotonic() - started
    assert out.returncode == 0, out.stderr[-3000:]
    assert not [e for e in events if e["type"] == "error"], events
    print(f"\nfigure: a {seconds:.1f} s file took {took:.1f} s")
    assert took >= seconds * 0.9
    _every_utterance_once(finals(events), sentences, "a file to wyoming-faster-whisper --vad-endpointing")
