"""Streaming recognition with a bounded cost (issue 24), tested on a scripted stand-in for
Whisper: what the Whisper engine decodes, when, with which prompt, where it ends segments, and
what the server sends for them. No model and no network: deterministic and fast.

The stand-in "hears" a script of words with absolute times. The audio handed to it encodes
where it sits in the recording (each 10 ms frame's samples hold 1000 + the frame's number), so
it answers the words inside the window it was given, as faster-whisper would: pieces with a
leading space start words, times in seconds from the window's start."""
from __future__ import annotations

import array
import dataclasses
import sys
from typing import List, Optional, Sequence, Tuple

import pytest

from speechclient_server.engines import WhisperEngine, join_pieces, spoken
from speechclient_server.intents import Intents
from speechclient_server.server import SLU, Context, Settings
from speechclient_server._proto.speechly.slu.v1 import slu_pb2 as slu

RATE = 16000
FRAME = 160


def audio(start_s: float, seconds: float) -> bytes:
    """The recording from start_s on: each sample holds 1000 + its frame's number (loud: speech)."""
    first = int(start_s * RATE)
    a = array.array("h", (1000 + (i // FRAME) % 30000 for i in range(first, first + int(seconds * RATE))))
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


@dataclasses.dataclass
class W:
    text: str    # as faster-whisper writes a piece: " word", "-hearted", " man."
    start: float  # seconds from the window's start
    end: float
    word: str = ""

    def __post_init__(self):
        self.word = self.text


@dataclasses.dataclass
class Seg:
    words: List[W]
    text: str = ""
    no_speech_prob: float = 0.0  # as faster-whisper's Segment: how likely the window held no speech
    avg_logprob: float = -0.2    # and how sure the decoder was of its text

    @property
    def start(self) -> float:
        return self.words[0].start if self.words else 0.0

    @property
    def end(self) -> float:
        return self.words[-1].end if self.words else 0.0


def narration(seconds: float, words_per_sentence: int = 9, word_s: float = 0.32, pause_s: float = 0.3):
    """A script: (piece, start_s, end_s) with absolute times; sentences end with '.', pauses
    between sentences shorter than the server's 600 ms (a narrator's)."""
    script, t, n = [], 0.2, 0
    while t + word_s < seconds:
        n += 1
        last = n % words_per_sentence == 0
        script.append((f" w{n}{'.' if last else ''}", round(t, 2), round(t + word_s - 0.04, 2)))
        t += word_s + (pause_s if last else 0)
    return script


class ScriptedWhisper:
    """transcribe(audio, **kw) like faster-whisper's, from a script. Words whose middle lies in the
    window are heard; `unsure_tail_s`: a word ending that close to the window's end is misheard
    (spelled differently each time), as a real decoder guesses at a word cut off."""

    def __init__(self, script, unsure_tail_s: float = 0.0):
        self.script = script
        self.unsure_tail_s = unsure_tail_s
        self.calls: List[Tuple[float, float, Optional[str]]] = []  # (window start s, seconds, prompt)

    def transcribe(self, audio, **kw):
        first = int(round(float(audio[0]) * 32768)) - 1000
        start = first * FRAME / RATE
        length = len(audio) / RATE
        self.calls.append((start, length, kw.get("initial_prompt")))
        words = []
        for text, a, b in self.script:
            if start <= (a + b) / 2 <= start + length:
                if start + length - b < self.unsure_tail_s:
                    text = f" guess{len(self.calls)}"
                words.append(W(text, max(0.0, a - start), min(length, b - start)))
        return iter([Seg(words)] if words else []), None


def engine(model, **kw) -> WhisperEngine:
    return WhisperEngine(model=model, **kw)


def run_recognizer(eng: WhisperEngine, total_s: float, more: bool = False, chunk_s: float = 0.1):
    """Drives recognizers as the server does: 100 ms chunks, cut() after each feed, finish() at
    the end. Returns [(segment start s, final pieces' words)] and the tentatives seen."""
    rec = eng.recognizer()
    seg_start = 0.0
    finals, tentatives = [], []
    n = int(round(total_s / chunk_s))
    for i in range(n):
        words = rec.feed(audio(i * chunk_s, chunk_s), more=more and i < n - 1)
        cut = rec.cut()
        if cut is not None:
            finals.append((seg_start, cut.words))
            seg_start += cut.samples / RATE
            rec = cut.next
            words = cut.tentative
        if words:
            tentatives.append((seg_start, words))
    finals.append((seg_start, rec.finish()))
    return finals, tentatives


def script_words(script) -> List[str]:
    return [w for text, _, _ in script for w in spoken(text)]


# -- words as the recognizer wrote them

@pytest.mark.parametrize("pieces, words", [
    ([" He", " was", " not", " an", " ill", "-disposed", " young", " man."],
     "he was not an ill-disposed young man"),
    ([" rather", " cold", "-hearted", " and", " selfish."], "rather cold-hearted and selfish"),
    ([" I", " don", "'t", " know", " John", "'s", " dog."], "i don't know john's dog"),
    ([" Set", " a", " timer", " for", " 5", " minutes."], "set a timer for five minutes"),
    ([" It", " costs", " 1,000", " or", " 20."], "it costs 1000 or twenty"),
])
def test_whisper_words_are_joined_as_written(pieces, words):
    """faster-whisper splits 'cold-hearted' into ' cold' '-hearted' (a leading space marks a word's
    start): the server gave 'cold -hearted'. Pieces without a space join the word before."""
    script = [(p, 0.3 + 0.4 * i, 0.6 + 0.4 * i) for i, p in enumerate(pieces)]
    eng = engine(ScriptedWhisper(script))
    finals, _ = run_recognizer(eng, 0.4 * len(pieces) + 1.0)
    got = [w for _, seg in finals for w, _, _ in seg]
    assert " ".join(got) == words
    # a joined word spans its pieces
    whole = [(w, a, b) for _, seg in finals for w, a, b in seg if "-" in w]
    for w, a, b in whole:
        i = next(i for i, p in enumerate(pieces) if p.strip().lower() in w and i + 1 < len(pieces)
                 and not pieces[i + 1].startswith(" "))
        assert (a, b) == (int(script[i][1] * 1000), int(script[i + 1][2] * 1000))


def test_join_pieces_keeps_a_leading_piece_alone():
    assert join_pieces([("-sposed", 0.0, 0.5), (" young", 0.5, 0.8)]) == [("-sposed", 0, 500), ("young", 500, 800)]
    assert spoken("-sposed") == ["sposed"]


# -- bounded cost

def test_whisper_decodes_only_what_is_not_final_with_the_final_text_as_prompt():
    """Two minutes of narration without a pause long enough for the silence detector, audio at
    real time: segments end at sentences both decodes agree on, so no decode sees more than
    the bound, the decodes per second of audio stay constant, every word is final once, in order,
    and each decode after the first segment is prompted with the text already final."""
    script = narration(120)
    model = ScriptedWhisper(script)
    eng = engine(model, max_segment_s=15)
    finals, _ = run_recognizer(eng, 121)
    got = [w for _, seg in finals for w, _, _ in seg]
    assert got == script_words(script)
    assert len(finals) >= 120 / 15
    longest = max(length for _, length, _ in model.calls)
    assert longest <= 15.0, longest
    # what was decoded per second of audio does not grow with the recording: the second minute
    # costs what the first did (before: each decode re-read the whole growing segment)
    first = sum(length for start, length, _ in model.calls if start < 60)
    second = sum(length for start, length, _ in model.calls if start >= 60)
    assert second < first * 1.3, (first, second)
    assert len(model.calls) <= 121 * 1.1  # about one decode per second of new audio
    # segments end at sentence ends; each later decode is prompted with what was final before it
    assert all(seg for _, seg in finals[:-1]), finals
    for start, _, prompt in model.calls:
        before = [text for text, _, b in script if b <= start]  # what was said before the window
        if not before:
            assert prompt is None
            continue
        assert prompt and len(prompt) <= 200, (start, prompt)
        assert "".join(before).strip().endswith(prompt), (start, prompt)
        if start < script[-1][2]:  # (after the last word: the trailing audio's own final decode)
            assert prompt.endswith("."), (start, prompt)


def test_whisper_segments_end_only_on_words_two_decodes_agree_on():
    """The last word of every window is misheard, differently each time: local agreement never
    makes it final, so the finals are the script exactly."""
    script = narration(40)
    model = ScriptedWhisper(script, unsure_tail_s=0.6)
    finals, tentatives = run_recognizer(engine(model, max_segment_s=15), 41)
    assert [w for _, seg in finals for w, _, _ in seg] == script_words(script)
    assert any(w.startswith("guess") for _, t in tentatives for w, _, _ in t)  # shown, never final
    assert len(finals) >= 4


def test_whisper_skips_tentative_decodes_while_audio_waits():
    """A file sent faster than real time: with more audio waiting, only the bound decodes (and
    the end); a segment is cut at its last sentence end a second or more before the window's end."""
    script = narration(120)
    model = ScriptedWhisper(script)
    finals, _ = run_recognizer(engine(model, max_segment_s=15), 121, more=True)
    assert [w for _, seg in finals for w, _, _ in seg] == script_words(script)
    assert len(model.calls) <= 121 / 10 + 2, len(model.calls)  # before: one per second of audio
    assert max(length for _, length, _ in model.calls) <= 15.0


def test_whisper_fixed_decodes_do_not_depend_on_arrival():
    """--whisper-fixed-decodes: the same decodes, at the same audio positions, whether the audio
    waits (a file sent fast) or not, and whatever the last decode cost; a tentative decode waits
    for the decoder instead of being skipped."""
    script = narration(40)
    runs = []
    for more in (False, True):
        model = ScriptedWhisper(script)
        finals, tentatives = run_recognizer(engine(model, max_segment_s=15, fixed_decodes=True), 41, more=more)
        runs.append(([(start, length) for start, length, _ in model.calls], finals, tentatives))
    assert runs[0] == runs[1]
    assert len(runs[0][0]) >= 40  # one per second of audio, none skipped
    eng = engine(ScriptedWhisper([(" hello", 0.2, 0.6)]), fixed_decodes=True)
    assert eng.turn(1)
    eng.release(5.0)  # a slow decode: without fixed decodes, tentatives would wait 5 s now
    assert eng.turn(2)
    eng.lock.release()


def test_whisper_tentative_decodes_take_turns_without_queueing(monkeypatch):
    """Streams share one decoder. A tentative decode is skipped while another runs (not queued
    behind it), and the next free turn goes to the stream that has waited longest; a stream that
    stopped asking is not waited for. Decodes at the bound and the end always run."""
    eng = engine(ScriptedWhisper([(" hello", 0.2, 0.6)]))
    assert eng.turn(1)          # free: stream 1 decodes
    assert not eng.turn(2)      # busy: stream 2 skips, and is now waiting
    eng.lock.release()
    assert not eng.turn(3)      # free, but stream 2 has waited longer
    assert eng.turn(2)
    eng.lock.release()
    assert eng.turn(3)
    eng.lock.release()
    assert eng.turn(3)          # again: nobody waits
    eng.lock.release()
    assert eng.turn(4) and not eng.turn(5)
    eng.lock.release()
    monkeypatch.setattr(WhisperEngine, "STALE_S", 0.0)  # 5 stopped asking: 6 does not wait for it
    assert eng.turn(6)
    eng.lock.release()

    # A decode that must run (bound, end) waiting for the decoder goes before any tentative one,
    # and after a decode, tentatives wait as long as it took.
    import threading
    assert eng.turn(7)
    urgent = threading.Thread(target=lambda: (eng.acquire(), eng.release(0.3)))
    urgent.start()
    while not eng._urgent:
        pass
    eng.lock.release()
    assert not eng.turn(8)      # the urgent decode is waiting or running
    urgent.join()
    assert not eng.turn(8)      # it took 0.3 s: the decoder rests 0.3 s
    eng.forget(8)

    monkeypatch.setattr(eng, "_idle_until", 0.0)
    import time
    now = time.monotonic()
    monkeypatch.setattr(eng, "_busy", [(now - 7.0, now - 1.0)])  # busy 6 of the last 10 s: no tentatives
    assert not eng.turn(9)
    eng.forget(9)
    monkeypatch.setattr(eng, "_busy", [(now - 4.0, now - 1.0)])
    assert eng.turn(9)
    eng.lock.release()

    rec = eng.recognizer()
    eng.lock.acquire()          # another stream's decode runs
    assert rec.feed(audio(0, 1.0)) is None and eng.model.calls == []
    eng.lock.release()
    assert rec.feed(audio(1.0, 0.1)) == [("hello", 200, 600)]
    assert len(eng.model.calls) == 1


def test_whisper_bound_without_any_sentence_end():
    """Run-on speech: no sentence end, no pause. The bound still cuts (at the last word a second
    before the window's end) and every word comes out final once."""
    script = narration(50, words_per_sentence=10 ** 6)
    model = ScriptedWhisper(script)
    finals, _ = run_recognizer(engine(model, max_segment_s=10), 51)
    assert [w for _, seg in finals for w, _, _ in seg] == script_words(script)
    assert max(length for _, length, _ in model.calls) <= 10.0
    assert len(finals) >= 5


def test_whisper_drops_the_final_words_decoded_again_at_the_next_segment_start():
    """A cut in the middle of a gap: if the next window still holds the end of the last final word,
    Whisper writes it again. A repeat of the last final words in the first second is dropped."""
    script = [(" one", 0.2, 0.5), (" two.", 0.5, 0.9), (" three", 0.92, 1.3), (" four.", 1.3, 1.7)]

    class Repeats(ScriptedWhisper):
        def transcribe(self, audio, **kw):
            segs, info = super().transcribe(audio, **kw)
            segs = list(segs)
            if self.calls[-1][0] > 0.5 and segs:  # a later window: hears "two." again at its start
                segs[0].words.insert(0, W(" two.", 0.0, 0.05))
            return iter(segs), info

    eng = engine(Repeats(script), redecode_s=0.5, max_segment_s=15)
    finals, _ = run_recognizer(eng, 2.5)
    assert [w for _, seg in finals for w, _, _ in seg] == ["one", "two", "three", "four"]


@pytest.mark.parametrize("tail, kept", [
    ([(" Thank", 3.05, 3.2), (" you.", 3.2, 3.45)], ""),
    ([(" Okay.", 3.05, 3.4)], ""),
    # Whisper's times for a real last word may lie in the silence after it: kept
    ([(" himself.", 3.05, 3.45)], " himself"),
])
def test_whisper_drops_words_invented_on_the_trailing_noise(tail, kept):
    """Whisper writes "Thank you." on the quiet noise that ends a recording (a LibriVox clip: its
    last 0.3 s at RMS 300-425, above the silence threshold, came back as 'Thank you.')."""
    script = [(" He", 0.2, 0.5), (" might", 0.5, 0.9), (" even", 0.9, 1.3), (" have", 1.3, 1.6),
              (" been", 1.6, 2.0), (" made", 2.0, 2.5), (" amiable.", 2.5, 2.95)] + tail
    # 0.5 s of noise at RMS 200, 6x quieter than the scripted words (RMS ~1150)
    noise = array.array("h", (200 if i % 2 else -200 for i in range(8000))).tobytes()
    eng = engine(ScriptedWhisper(script))
    rec = eng.recognizer()
    rec.feed(audio(0, 3.0) + noise)
    assert " ".join(w for w, _, _ in rec.finish()) == "he might even have been made amiable" + kept


def test_a_segment_that_only_carried_words_is_decoded_for_its_final():
    """Whisper may write nothing after a sentence end near a window's end (faster-whisper skipped
    an odd sonnet line it doubted). A cut there leaves the next segment with no carried words; when
    the stream stops before that segment's own decode (a microphone stream moving to a new stream
    at a pause), its final must come from a decode of its audio, not from the empty carry."""
    script = [(" one", 0.2, 0.5), (" two", 0.5, 0.9), (" three", 0.9, 1.3), (" four.", 1.3, 1.7),
              (" five", 2.3, 2.6), (" six.", 2.6, 2.95)]

    class OmitsAfterASentence(ScriptedWhisper):
        def transcribe(self, audio, **kw):
            segs, info = super().transcribe(audio, **kw)
            segs = list(segs)
            for seg in segs:
                ends = [i for i, w in enumerate(seg.words) if w.text.endswith(".")]
                if ends:
                    del seg.words[ends[0] + 1:]
            return iter(segs), info

    model = OmitsAfterASentence(script)
    stream = FakeStream(engine(model))
    stream.audio(audio(0, 3.0))  # the decode at 3.0 s cuts after "four." and carries nothing
    segs = segments(stream.stop())
    assert [[w.word for w in s["final"]] for _, s in sorted(segs.items())] == [
        ["one", "two", "three", "four"], ["five", "six"]]


def test_speech_the_final_decode_skipped_is_decoded_again():
    """Whisper can write a window's first seconds, then nothing for seconds of speech, and put
    its last words at the window's end (measured: a 14 s LibriVox window gave 'thy content and
    tender' and left out a whole sonnet line). The final decode fills such a hole."""
    script = [(f" w{i}", 0.2 + i * 0.4, 0.55 + i * 0.4) for i in range(14)]  # 0.2-5.75 s

    class Skips(ScriptedWhisper):
        def transcribe(self, audio, **kw):
            segs, info = super().transcribe(audio, **kw)
            segs = list(segs)
            length = len(audio) / RATE
            for seg in segs:
                if self.calls[-1][0] < 0.1 and length > 4:  # the whole window: the middle is skipped
                    seg.words = [w for w in seg.words if w.end <= 2.0] + [W(w.text, length, length) for w in seg.words[-2:]]
            return iter(segs), info

    model = Skips(script)
    rec = engine(model).recognizer()
    rec.feed(audio(0, 6.0), more=True)
    assert [w for w, _, _ in rec.finish()] == script_words(script)
    assert len(model.calls) == 2 and model.calls[1][2].endswith("w3")  # prompted with the words before

    # A second look that hears nothing there keeps what the first decode had, hole and all.
    class SkipsAlways(Skips):
        def transcribe(self, audio, **kw):
            segs, info = super().transcribe(audio, **kw)
            return (iter([]) if self.calls[-1][0] >= 0.1 else segs), info

    model = SkipsAlways(script)
    rec = engine(model).recognizer()
    rec.feed(audio(0, 6.0), more=True)
    assert [w for w, _, _ in rec.finish()] == ["w0", "w1", "w2", "w3", "w12", "w13"]
    assert len(model.calls) == 2


def test_whisper_text_doubted_as_no_speech_is_kept_where_the_audio_is_loud():
    """faster-whisper skips a window it thinks held no speech and whose text it doubts; that
    dropped real speech. The server asks it to skip nothing and drops only such text on silence."""
    doubted = dict(no_speech_prob=0.9, avg_logprob=-1.5)

    class Doubting:
        def __init__(self):
            self.kw = {}

        def transcribe(self, audio, **kw):
            self.kw = kw
            return iter([Seg([W(" Churl,", 0.2, 0.6), W(" mak'st", 0.6, 1.0), W(" waste", 1.0, 1.5)], **doubted),
                         Seg([W(" Thank", 2.2, 2.5), W(" you.", 2.5, 2.8)], **doubted)]), None

    model = Doubting()
    rec = engine(model).recognizer()
    rec.feed(audio(0, 2.0) + b"\0\0" * RATE)  # speech, then a second of silence
    assert " ".join(w for w, _, _ in rec.finish()) == "churl mak'st waste"
    assert "no_speech_threshold" in model.kw and model.kw["no_speech_threshold"] is None


def test_whisper_does_not_decode_silence():
    eng = engine(ScriptedWhisper([(" thanks", 0.0, 0.5)]))
    rec = eng.recognizer()
    rec.feed(b"\0\0" * RATE * 2)
    assert rec.finish() == [] and eng.model.calls == []


# -- the server around it: segments, ids, finals, stop

class FakeStream:
    """Runs SLU's recognition on a context, as Stream does, collecting the responses."""

    def __init__(self, eng, **settings):
        self.slu = SLU(Settings(secret=b"x", **settings), eng, Intents.load())
        self.ctx = Context(RATE)
        self.ctx.limit_samples = 10 ** 9
        self.out: List = []

    def audio(self, pcm: bytes, more: bool = False, chunk: int = 3200):
        for i in range(0, len(pcm), chunk):
            self.out += list(self.slu._audio(self.ctx, pcm[i:i + chunk], more=more))

    def stop(self):
        self.out += list(self.slu._finish(self.ctx))
        return self.out


def segments(responses):
    """{segment id: {"tentative": [texts], "final": [words], "end": bool}} in order of ids."""
    segs = {}
    for r in responses:
        k = r.WhichOneof("streaming_response")
        s = segs.setdefault(r.segment_id, {"tentative": [], "final": [], "end": False, "after_end": []})
        if s["end"] and k != "finished":
            s["after_end"].append(k)
        if k == "tentative_transcript":
            s["tentative"].append(r.tentative_transcript.tentative_transcript)
        elif k == "transcript":
            s["final"].append(r.transcript)
        elif k == "segment_end":
            s["end"] = True
    return segs


def test_server_ends_every_segment_with_finals_and_numbers_them_in_order():
    script = narration(60)
    eng = engine(ScriptedWhisper(script, unsure_tail_s=0.6), max_segment_s=15)
    stream = FakeStream(eng, segment_silence_ms=600)
    stream.audio(audio(0, 61))
    out = stream.stop()
    kinds = [r.WhichOneof("streaming_response") for r in out]
    assert kinds[-1] == "finished" and kinds[-2] == "segment_end"
    segs = segments(out[:-1])
    assert sorted(segs) == list(range(len(segs))) and len(segs) >= 5
    for sid, s in segs.items():
        assert s["end"] and s["final"] and not s["after_end"], (sid, s)
        assert all(s["tentative"]), "no empty tentative transcript"
        assert [w.index for w in s["final"]] == list(range(len(s["final"])))
    words = [w for sid in sorted(segs) for w in segs[sid]["final"]]
    assert [w.word for w in words] == script_words(script)
    # times from the context's first sample, increasing across segments
    assert all(a.end_time <= b.start_time for a, b in zip(words, words[1:]))
    assert abs(words[-1].end_time - script[-1][2] * 1000) <= 20
    # each segment's span stays within the bound
    for s in segs.values():
        assert s["final"][-1].end_time - s["final"][0].start_time <= 15000


def test_server_skips_tentative_decodes_when_audio_is_queued():
    script = narration(60)
    model = ScriptedWhisper(script)
    stream = FakeStream(engine(model, max_segment_s=15))
    stream.audio(audio(0, 61), more=True)
    segs = segments(stream.stop())
    assert [w.word for sid in sorted(segs) for w in segs[sid]["final"]] == script_words(script)
    assert len(model.calls) <= 61 / 10 + 2


def test_stop_ends_the_open_segment_with_its_finals_before_finished():
    script = [(" turn", 0.2, 0.5), (" on", 0.5, 0.7), (" the", 0.7, 0.8), (" kitchen", 0.8, 1.2),
              (" lights", 1.2, 1.6)]
    stream = FakeStream(engine(ScriptedWhisper(script)))
    stream.audio(audio(0, 1.7))
    out = stream.stop()
    kinds = [r.WhichOneof("streaming_response") for r in out]
    assert kinds[-3:] == ["intent", "segment_end", "finished"], kinds
    assert [r.transcript.word for r in out if r.HasField("transcript")] == "turn on the kitchen lights".split()
