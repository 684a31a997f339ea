"""Exceptions, one per spc_status, all derived from SpeechClientError."""
from __future__ import annotations

from typing import Dict, Optional, Type

from ._native import Status


class SpeechClientError(Exception):
    """A failure reported by libspeechclient.

    `code` is the Status, `message` the library's text naming what was wrong, `grpc_status` the
    gRPC status the server reported (0-16) or None when the failure was not a gRPC status.
    Catch a subclass (NetworkError, AudioError, ...) or this class for all of them.
    """

    #: The status a subclass stands for.
    status: Status = Status.INTERNAL
    #: For an option the library rejected when the Client was made: the option's name ("url",
    #: "chunk_ms", "audio", ...); None otherwise.
    option: Optional[str] = None

    def __init__(self, code: int, message: str = "", grpc_status: Optional[int] = None):
        if not isinstance(code, int):
            # A message given where the status belongs: a bug in the caller, not a status.
            raise TypeError(f"{type(self).__name__}: the first argument is the status, got {code!r}")
        try:
            self.code: Status = Status(code)
        except ValueError:
            self.code = Status.INTERNAL
            message = f"unknown status {code}: {message}"
        self.message = message
        self.grpc_status = grpc_status if grpc_status is None or grpc_status >= 0 else None
        super().__init__(self.code, message, self.grpc_status)

    def __str__(self) -> str:
        return self.message or self.code.name.lower().replace("_", " ")

    def __repr__(self) -> str:
        grpc = "" if self.grpc_status is None else f", grpc_status={self.grpc_status}"
        return f"{type(self).__name__}({self.code.name}, {self.message!r}{grpc})"

    def __reduce__(self):
        return (type(self), (int(self.code), self.message, self.grpc_status))


class InvalidArgumentError(SpeechClientError, ValueError):
    """SPC_ERROR_INVALID_ARGUMENT: a malformed or out-of-range value."""
    status = Status.INVALID_ARGUMENT


class InvalidStateError(SpeechClientError):
    """SPC_ERROR_INVALID_STATE: not allowed in the client's current state (or the client is closed)."""
    status = Status.INVALID_STATE


class NoMemoryError(SpeechClientError, MemoryError):
    """SPC_ERROR_NO_MEMORY."""
    status = Status.NO_MEMORY


class NetworkError(SpeechClientError, ConnectionError):
    """SPC_ERROR_NETWORK: the server could not be reached or the connection broke."""
    status = Status.NETWORK


class TLSError(SpeechClientError):
    """SPC_ERROR_TLS: the TLS handshake or verification failed."""
    status = Status.TLS


class SpeechTimeoutError(SpeechClientError, TimeoutError):
    """SPC_ERROR_TIMEOUT: a connect, request or wait timed out."""
    status = Status.TIMEOUT


class AuthError(SpeechClientError):
    """SPC_ERROR_AUTH: login failed or the server rejected the token."""
    status = Status.AUTH


class APIError(SpeechClientError):
    """SPC_ERROR_API: the server answered with an error status (see grpc_status)."""
    status = Status.API


class ParseError(SpeechClientError):
    """SPC_ERROR_PARSE: the server sent something that is not valid protocol."""
    status = Status.PARSE


class AudioError(SpeechClientError):
    """SPC_ERROR_AUDIO: a WAV file or ALSA device could not be read or opened."""
    status = Status.AUDIO


class InternalError(SpeechClientError):
    """SPC_ERROR_INTERNAL: a bug in the library."""
    status = Status.INTERNAL


EXCEPTIONS: Dict[Status, Type[SpeechClientError]] = {
    cls.status: cls for cls in (InvalidArgumentError, InvalidStateError, NoMemoryError, NetworkError, TLSError,
                                SpeechTimeoutError, AuthError, APIError, ParseError, AudioError, InternalError)
}


def error_for(code: int, message: str = "", grpc_status: Optional[int] = None) -> SpeechClientError:
    """The exception for a status: an instance of its subclass (InternalError for an unknown one)."""
    try:
        cls = EXCEPTIONS.get(Status(code), InternalError)
    except ValueError:
        cls = InternalError
    return cls(code, message, grpc_status)
