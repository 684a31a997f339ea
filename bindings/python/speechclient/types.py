"""Plain values copied out of the library's callbacks, so they outlive them."""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple, Union


@dataclasses.dataclass(frozen=True)
class Word:
    text: str
    index: int
    start_ms: int
    end_ms: int
    final: bool


@dataclasses.dataclass(frozen=True)
class Intent:
    intent: str
    final: bool


@dataclasses.dataclass(frozen=True)
class Entity:
    type: str
    value: str
    start: int
    end: int
    final: bool


@dataclasses.dataclass(frozen=True)
class Segment:
    context_id: str
    segment_id: int
    final: bool
    transcript: str
    words: Tuple[Word, ...]
    intent: Optional[Intent]
    entities: Tuple[Entity, ...]
    json: str


@dataclasses.dataclass(frozen=True)
class StartEvent:
    context_id: str


@dataclasses.dataclass(frozen=True)
class StopEvent:
    context_id: str


@dataclasses.dataclass(frozen=True)
class ErrorEvent:
    code: int
    message: str
    grpc_status: Optional[int]


@dataclasses.dataclass(frozen=True)
class Microphone:
    device: str = "default"


@dataclasses.dataclass(frozen=True)
class WavFile:
    path: str


@dataclasses.dataclass(frozen=True)
class PushAudio:
    sample_rate: int = 16000
    channels: int = 1


Update = Union[Segment, StartEvent, StopEvent, ErrorEvent]
AudioSource = Union[Microphone, WavFile, PushAudio]
