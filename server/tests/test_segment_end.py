"""Every segment ends, with every word it was heard to have (issue 19, items 3 and 8), and no
segment grows past the bound (issue 24), with the default engine (PocketSphinx + the grammar).
Speech is synthesized at test time with espeak-ng and sox."""
import subprocess

import pytest

from conftest import audio_chunks, config, kind, silence, start, stop
from speechclient_server.audio import Resampler

COMMANDS = ["turn on the kitchen lights", "set a timer for five minutes", "turn off the bedroom lights",
            "play some jazz music"]


@pytest.fixture(scope="module")
def say(tmp_path_factory):
    """say(text, rate=16000, voice="en-us", wpm=160, trim=False) -> PCM16 at `rate`; trim: no
    silence after the last word (a stop right after speech)."""
    folder = tmp_path_factory.mktemp("say")
    cache = {}

    def make(text, rate=16000, voice="en-us", wpm=160, trim=False):
        key = (text, rate, voice, wpm, trim)
        if key not in cache:
            wav, raw = folder / f"{len(cache)}.wav", folder / f"{len(cache)}.raw"
            subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(wav), text], check=True)
            cmd = ["sox", "-R", str(wav), "-r", str(rate), "-c", "1", "-b", "16", "-e", "signed-integer", str(raw)]
            if trim:
                cmd += ["reverse", "silence", "1", "0.01", "1%", "reverse"]
            subprocess.run(cmd, check=True)
            cache[key] = raw.read_bytes()
        return cache[key]
    return make


def to_16k(pcm: bytes, rate: int) -> bytes:
    """What the client does with audio at another rate: resample it to 16 kHz itself (a Kaiser
    windowed sinc, like the library's Resampler), and send 16 kHz."""
    if rate == 16000:
        return pcm
    r = Resampler(rate)
    return r.process(pcm) + r.flush()


def by_segment(responses):
    segs = {}
    for r in responses:
        k = kind(r)
        if k in ("started", "finished", "rtt_request"):
            continue
        s = segs.setdefault(r.segment_id, {"tentative": [], "final": [], "intent": None, "end": False})
        assert not s["end"], f"{k} after segment_end of segment {r.segment_id}"
        if k == "tentative_transcript":
            s["tentative"].append(r.tentative_transcript.tentative_transcript)
        elif k == "transcript":
            s["final"].append(r.transcript.word)
        elif k == "intent":
            s["intent"] = r.intent.intent
        elif k == "segment_end":
            s["end"] = True
    return segs


def check_every_segment_ends(responses):
    """Every segment that said anything ends with final words and segment_end, before finished;
    no tentative transcript is empty. rtt_requests run on their own timer, and one may follow
    finished on a long stream: they are left out."""
    responses = [r for r in responses if kind(r) != "rtt_request"]
    assert kind(responses[-1]) == "finished"
    segs = by_segment(responses)
    for sid, s in segs.items():
        assert s["end"], f"segment {sid} never ended: {s}"
        assert s["final"], f"segment {sid} ended without final words: {s}"
        assert all(s["tentative"]), f"segment {sid}: an empty tentative transcript: {s['tentative']}"
    return segs


@pytest.mark.parametrize("rate", [8000, 16000, 44100, 48000])
@pytest.mark.parametrize("who_resamples", ["client", "server"])
def test_every_segment_ends_with_final_words_at_every_rate(server, say, rate, who_resamples):
    """Before: an 8 kHz recording resampled by the client (sent as 16 kHz) and stopped right after
    the speech gave tentative words, then an empty tentative, then `finished` with no final and
    no segment_end ("set a timer for five minutes": 'what' ... '' ... finished)."""
    token = server.login().token
    for text in COMMANDS:
        for trim in (False, True):
            pcm = say(text, rate, trim=trim)
            if who_resamples == "client":
                reqs = [config(16000), start(), *audio_chunks(to_16k(pcm, rate)), stop()]
            else:
                reqs = [config(rate), start(), *audio_chunks(pcm, rate), stop()]
            responses = server.stream(reqs, token=token)
            segs = check_every_segment_ends(responses)
            assert segs, f"{text!r} at {rate} Hz: no segment at all"


@pytest.mark.parametrize("text", ["turn on the kitchen lights", "play some jazz music", "stop the music"])
def test_telephone_band_audio_resampled_by_the_client_is_recognised(server, say, text):
    """8 kHz audio the client resampled arrives as 16 kHz: the server measures that nothing is above
    4 kHz and primes PocketSphinx with the telephone-band CMN, as for audio sent at 8 kHz. Before:
    'turn on the', nothing, 'stop'."""
    pcm = to_16k(say(text, 8000), 8000)
    responses = server.stream([config(16000), start(), *audio_chunks(pcm), stop()], token=server.login().token)
    # Every segment's tentatives and finals on failure: one CI run got 'turn on the' for 'play
    # some jazz music' (stop 35, not reproduced), and the final alone did not say where it went wrong.
    assert " ".join(r.transcript.word for r in responses if kind(r) == "transcript") == text, \
        by_segment([r for r in responses if kind(r) != "rtt_request"])


# Voices and speeds where PocketSphinx's final came back shorter than its last tentative (measured
# before the fix: 'set a timer for five' after 'set a timer for five minutes', 200 wpm).
DROPS = [("set a timer for five minutes", "en-us", 200, False), ("set a timer for five minutes", "en-us", 200, True),
         ("turn on the kitchen lights", "en", 200, False), ("set a timer for twenty minutes", "en", 200, True),
         ("what time is it", "en-us", 130, False), ("what time is it", "en-us", 200, False)]
INTENT = {"set": "set_timer", "turn": "turn_on", "what": "what_time"}


@pytest.mark.parametrize("text, voice, wpm, trim", DROPS)
def test_final_keeps_the_words_of_the_last_tentative(server, say, text, voice, wpm, trim):
    """Issue 19 item 8: PocketSphinx's lattice rescoring (bestpath) ignored the grammar at the end
    of the utterance and let a long silence swallow the last word, so the final lost 'minutes'
    (and the set_timer intent). The final is now the grammar search's own result."""
    pcm = say(text, voice=voice, wpm=wpm, trim=trim)
    responses = server.stream([config(), start(), *audio_chunks(pcm), stop()], token=server.login().token)
    segs = check_every_segment_ends(responses)
    assert list(segs) == [0]
    s = segs[0]
    assert len(s["final"]) >= len(s["tentative"][-1].split()), s
    assert " ".join(s["final"]) == text
    assert s["intent"] == INTENT[text.split()[0]]  # computed on the final words


def test_pocketsphinx_segments_are_bounded(start_server, say):
    """Commands spoken one after another with pauses shorter than the silence that ends a segment:
    before, one segment grew for as long as the speech went on. With --max-segment 5 each segment
    ends at a pause once it reaches 5 s, and every command is still recognised."""
    s = start_server("--max-segment", "5")
    texts = COMMANDS * 2
    pcm = b"".join(say(t, trim=True) + silence(0.25) for t in texts)
    responses = s.stream([config(), start(), *audio_chunks(pcm), stop()], token=s.login().token)
    segs = check_every_segment_ends(responses)
    assert len(segs) >= len(pcm) / 32000 / 5
    words = [r.transcript for r in responses if kind(r) == "transcript"]
    spans = {}
    for r in responses:
        if kind(r) == "transcript":
            a, b = spans.get(r.segment_id, (r.transcript.start_time, r.transcript.end_time))
            spans[r.segment_id] = (min(a, r.transcript.start_time), max(b, r.transcript.end_time))
    assert all(b - a <= 5000 for a, b in spans.values()), spans
    heard = " ".join(w.word for w in words)
    for t in texts:
        assert t in heard, heard
