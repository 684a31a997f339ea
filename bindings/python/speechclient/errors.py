"""Exceptions mapped one to one from spc_status."""
from __future__ import annotations

from typing import Dict, Optional, Type

from ._native import Status


class SpeechClientError(Exception):
    """A failure reported by libspeechclient: `code` (Status), `message`, and the gRPC status
    the server gave, when it gave one."""

    code: Status = Status.INTERNAL

    def __init__(self, message: str, code: Optional[Status] = None, grpc_status: Optional[int] = None):
        super().__init__(message)
        if code is not None:
            self.code = Status(code)
        self.message = message
        self.grpc_status = grpc_status

    def __str__(self) -> str:
        return self.message


class InvalidArgumentError(SpeechClientError, ValueError):
    code = Status.INVALID_ARGUMENT


class InvalidStateError(SpeechClientError):
    code = Status.INVALID_STATE


class NoMemoryError(SpeechClientError, MemoryError):
    code = Status.NO_MEMORY


class NetworkError(SpeechClientError, ConnectionError):
    code = Status.NETWORK


class TLSError(SpeechClientError):
    code = Status.TLS


class SpeechTimeoutError(SpeechClientError, TimeoutError):
    code = Status.TIMEOUT


class AuthError(SpeechClientError):
    code = Status.AUTH


class APIError(SpeechClientError):
    code = Status.API


class ParseError(SpeechClientError):
    code = Status.PARSE


class AudioError(SpeechClientError):
    code = Status.AUDIO


class InternalError(SpeechClientError):
    code = Status.INTERNAL


_BY_STATUS: Dict[Status, Type[SpeechClientError]] = {
    cls.code: cls for cls in (InvalidArgumentError, InvalidStateError, NoMemoryError, NetworkError, TLSError,
                              SpeechTimeoutError, AuthError, APIError, ParseError, AudioError, InternalError)
}


def error_for(status: int, message: str, grpc_status: Optional[int] = None) -> SpeechClientError:
    try:
        code = Status(status)
    except ValueError:
        return InternalError(f"unknown status {status}: {message}", Status.INTERNAL, grpc_status)
    return _BY_STATUS.get(code, InternalError)(message, code, grpc_status)
