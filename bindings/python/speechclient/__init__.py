"""libspeechclient for Python: streaming speech recognition through the C library.

    import speechclient
    with speechclient.Client("grpc://127.0.0.1:50051", app_id="demo",
                             audio=speechclient.WavFile("speech.wav")) as client:
        client.start()
        for update in client.updates():
            if isinstance(update, speechclient.Segment) and update.final:
                print(update.transcript)
"""
from ._native import LogLevel, State, Status
from .client import Client
from .errors import (APIError, AudioError, AuthError, InternalError, InvalidArgumentError, InvalidStateError,
                     NetworkError, NoMemoryError, ParseError, SpeechClientError, SpeechTimeoutError, TLSError,
                     error_for)
from .types import (Entity, ErrorEvent, Intent, Microphone, PushAudio, Segment, StartEvent, StopEvent, Update,
                    WavFile, Word)
from . import _native


def version() -> str:
    """The loaded library's version."""
    return _native.spc_version().decode()


def status_text(status: int) -> str:
    return _native.spc_status_str(status).decode()


__all__ = [
    "Client", "LogLevel", "State", "Status", "Segment", "Word", "Intent", "Entity", "StartEvent", "StopEvent",
    "ErrorEvent", "Update", "Microphone", "WavFile", "PushAudio", "SpeechClientError", "InvalidArgumentError",
    "InvalidStateError", "NoMemoryError", "NetworkError", "TLSError", "SpeechTimeoutError", "AuthError", "APIError",
    "ParseError", "AudioError", "InternalError", "error_for", "version", "status_text",
]
