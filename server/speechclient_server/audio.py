"""PCM16 helpers: frame energy for the silence detector, and a streaming resampler to the
recognizers' 16 kHz (numpy, imported only when a client sends another rate)."""
from __future__ import annotations

import array
import math
import sys

RATE = 16000


def rms(pcm: bytes) -> float:
    samples = array.array("h", pcm)
    if sys.byteorder == "big":
        samples.byteswap()
    if not samples:
        return 0.0
    return math.sqrt(sum(s * s for s in samples) / len(samples))


class Resampler:
    """Band-limited (Kaiser-windowed sinc) resampling of a PCM16 stream from `rate` to 16 kHz,
    chunk by chunk. Output sample k sits exactly at input time k * rate / 16000, so word times
    computed from output samples are times in the client's audio. `flush()` returns the tail."""

    def __init__(self, rate: int, out_rate: int = RATE, half_width: int = 16):
        import numpy as np
        self.np = np
        self.rate, self.out_rate = rate, out_rate
        ratio = out_rate / rate
        self.cutoff = min(1.0, ratio) * 0.92                     # of the input's Nyquist
        self.half = int(math.ceil(half_width / min(1.0, ratio)))  # taps each side, input samples
        self.beta = 8.0
        self.buf = np.zeros(self.half, dtype=np.float64)          # zeros before the first sample
        self.buf_start = -self.half                                # input index of buf[0]
        self.n_in = 0                                              # input samples received
        self.k = 0                                                 # next output sample

    def _emit(self, last_k: int) -> bytes:
        np = self.np
        if last_k < self.k:
            return b""
        ks = np.arange(self.k, last_k + 1, dtype=np.int64)
        base = (ks * self.rate) // self.out_rate
        t = ks * self.rate / self.out_rate
        offsets = np.arange(-self.half + 1, self.half + 1, dtype=np.int64)
        idx = base[:, None] + offsets[None, :]
        x = t[:, None] - idx
        window = np.kaiser(2 * self.half + 1, self.beta)  # sampled at integer offsets; interpolate
        w = np.interp(x, np.arange(-self.half, self.half + 1), window, left=0.0, right=0.0)
        kernel = self.cutoff * np.sinc(self.cutoff * x) * w
        values = self.buf[idx - self.buf_start]
        out = (values * kernel).sum(axis=1)
        self.k = last_k + 1
        keep_from = (self.k * self.rate) // self.out_rate - self.half + 1
        if keep_from > self.buf_start:
            self.buf = self.buf[keep_from - self.buf_start:]
            self.buf_start = keep_from
        return np.clip(np.round(out), -32768, 32767).astype("<i2").tobytes()

    def process(self, pcm: bytes) -> bytes:
        np = self.np
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
        self.buf = np.concatenate([self.buf, samples])
        self.n_in += len(samples)
        available = self.buf_start + len(self.buf) - 1          # last input index we hold
        # output k needs input up to floor(k * rate / out) + half
        last_k = ((available - self.half + 1) * self.out_rate - 1) // self.rate
        last_k = min(last_k, (self.n_in * self.out_rate - 1) // self.rate)
        return self._emit(last_k)

    def flush(self) -> bytes:
        self.buf = self.np.concatenate([self.buf, self.np.zeros(self.half + 1)])
        return self._emit((self.n_in * self.out_rate - 1) // self.rate)
