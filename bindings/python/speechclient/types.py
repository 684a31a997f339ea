"""Plain values copied out of the library's callbacks, so they outlive them, and the audio
source descriptions."""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Tuple, Union

from ._native import ConnectionState, Listen, Status


@dataclasses.dataclass(frozen=True)
class Word:
    """One word: its text, position in the segment, times in ms from the start of the context's
    audio (-1: unknown), whether it is final, and the server's confidence in it (0..1; None
    where the server gives none: only Riva does, with libspeechclient 0.8)."""
    text: str
    index: int
    start_ms: int
    end_ms: int
    final: bool
    confidence: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class Intent:
    intent: str
    final: bool


@dataclasses.dataclass(frozen=True)
class Entity:
    """An entity over the words [start, end) of its segment."""
    type: str
    value: str
    start: int
    end: int
    final: bool


@dataclasses.dataclass(frozen=True)
class Segment:
    """A snapshot of one segment of speech, as known at one update. `intent` is None while no
    intent is known. `confidence` is the server's confidence in a final transcript (0..1; None
    where it gives none). `json` is the library's rendering (spc_segment_json), the demo's
    stable JSON line; it is not part of equality."""
    context_id: str
    segment_id: int
    final: bool
    transcript: str
    words: Tuple[Word, ...]
    intent: Optional[Intent]
    entities: Tuple[Entity, ...]
    json: str = dataclasses.field(default="", compare=False, repr=False)
    confidence: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class StartEvent:
    """The server opened the audio context."""
    context_id: str


@dataclasses.dataclass(frozen=True)
class StopEvent:
    """The audio context is closed; context_id is "" when the server never opened it."""
    context_id: str


@dataclasses.dataclass(frozen=True)
class ErrorEvent:
    """Something failed on a library thread. grpc_status is None when the failure was not a
    gRPC status."""
    code: Status
    message: str
    grpc_status: Optional[int]

    def exception(self):
        """The matching SpeechClientError subclass instance, e.g. to raise it."""
        from .errors import error_for
        return error_for(self.code, self.message, self.grpc_status)


@dataclasses.dataclass(frozen=True)
class StateEvent:
    """The connection state changed (CONNECTING, READY, RECONNECTING, UNAVAILABLE, SUSPENDED).
    For RECONNECTING, attempt (from 1) and delay_ms; for UNAVAILABLE, the reason."""
    state: ConnectionState
    attempt: int
    delay_ms: int
    reason: Optional[ErrorEvent]


@dataclasses.dataclass(frozen=True)
class ListenEvent:
    """The hands-free pipeline reported an event (activation "voice" or "wakeword"): speech or
    silence heard, an activation begun or ended, or an activation cut at the maximum length.
    position_ms counts the audio since start(). `name`, for an activation: the wake word the
    wake-word service heard (its model name, "hey_jarvis_v0.1"), or the wakeword phrase; None
    otherwise (and with libspeechclient before 0.8)."""
    event: Listen
    position_ms: int
    name: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class LevelEvent:
    """The level of one chunk of audio in dBFS (0: full-scale square wave, -100: digital
    silence), at position_ms of audio since start(). Only with Client(levels=True)."""
    dbfs: float
    position_ms: int


@dataclasses.dataclass(frozen=True)
class AudioDevice:
    """An ALSA capture device (audio_devices()): `name` for Microphone(device=...), and ALSA's
    description."""
    name: str
    description: str


@dataclasses.dataclass(frozen=True)
class Microphone:
    """An ALSA capture device by name."""
    device: str = "default"


@dataclasses.dataclass(frozen=True)
class WavFile:
    """A WAV file; each start() streams it whole, then the context stops by itself."""
    path: Union[str, "os.PathLike[str]"]


@dataclasses.dataclass(frozen=True)
class PushAudio:
    """Interleaved signed 16-bit PCM given to Client.push()."""
    sample_rate: int = 16000
    channels: int = 1


Update = Union[Segment, StartEvent, StopEvent, ErrorEvent, StateEvent, ListenEvent, LevelEvent]
@dataclasses.dataclass(frozen=True)
class AudioStream:
    """Audio read by the library from a file descriptor you opened: a pipe, a socket, or
    standard input (fd 0, the default). sample_rate 0: a WAV stream (its header is read as it
    arrives); otherwise raw interleaved signed 16-bit little-endian PCM at sample_rate with
    channels. Each start() reads on from where the last context stopped; the end of the stream
    stops the context. The descriptor stays yours: it is never closed by the library; keep it
    open until the client is closed. libspeechclient 0.9."""
    fd: int = 0
    sample_rate: int = 0
    channels: int = 0


AudioSource = Union[Microphone, WavFile, PushAudio, AudioStream]
