"""libspeechclient for Python: streaming speech recognition through the C library (ctypes).

    import speechclient

    with speechclient.Client(url="grpc://127.0.0.1:50051", app_id="demo",
                             audio=speechclient.WavFile("speech.wav")) as client:
        client.start()
        for update in client.updates():
            if isinstance(update, speechclient.Segment) and update.final:
                print(update.transcript)

The library is found through $SPEECHCLIENT_LIBRARY (a path), then
ctypes.util.find_library("speechclient"), then "libspeechclient.so.0". `speechclient._native`
is the raw layer: the C header in ctypes.

Hands-free (0.2): with activation="voice" (or wakeword="hey computer") one start() listens, and
a context opens per utterance; ListenEvent updates say what the detector heard, and levels=True
adds a LevelEvent per chunk of audio:

    with speechclient.Client(url=..., audio=speechclient.Microphone(), activation="voice") as client:
        client.start()
        for update in client.updates():   # until client.stop() from another thread or a callback
            ...

Many streams in one process (0.3): with io="application" the clients' connections are read by
io_process(), called when io_fd() is readable, on the application's thread; with asyncio:
loop.add_reader(speechclient.io_fd(), speechclient.io_process).

asyncio, with the event loop running the callbacks (no other thread enters Python):

    client = speechclient.Client(url=..., audio=speechclient.WavFile("speech.wav"), delivery="application")
    async for update in client.stream():
        ...
"""
import ctypes

from . import _native
from ._native import Activation, ConnectionState, Delivery, Listen, LogLevel, NetworkIO, State, Status, VadParam
from .client import Client, Stream, copy_segment
from .errors import (EXCEPTIONS, APIError, AudioError, AuthError, InternalError, InvalidArgumentError,
                     InvalidStateError, NetworkError, NoMemoryError, ParseError, SpeechClientError,
                     SpeechTimeoutError, TLSError, error_for)
from .types import (AudioDevice, AudioSource, AudioStream, Entity, ErrorEvent, Intent, LevelEvent, ListenEvent, Microphone, PushAudio, Segment,
                    StartEvent, StateEvent, StopEvent, Update, WavFile, Word)

__version__ = _native.SPC_VERSION_STRING


def version() -> str:
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return _native.spc_version().decode()


def version_number() -> int:
    """The loaded library's version as MAJOR * 1000000 + MINOR * 1000 + PATCH."""
    return int(_native.spc_version_number())


def _require(present: bool, feature: str) -> None:
    """The error for a function the loaded (older) library lacks: `feature` names it and its release."""
    if not present:
        raise InvalidStateError(_native.Status.INVALID_STATE, f"{_native.LIBRARY_PATH} is libspeechclient "
                                f"{version()}, without {feature}")


def _require_application_io() -> None:
    _require(_native.HAS_APPLICATION_IO, "application-driven network I/O (0.3)")


def io_fd() -> int:
    """The process-wide descriptor of application-driven network I/O (spc_io_fd): readable while
    a connection of an io="application" client has work; the library owns it."""
    _require_application_io()
    fd = int(_native.spc_io_fd())
    if fd < 0:
        raise InternalError(_native.Status.INTERNAL, "spc_io_fd: the library's network thread could not be started")
    return fd


def io_process() -> int:
    """Does the ready network work of io="application" clients on this thread, without waiting
    (spc_io_process); returns how many connections were ready."""
    _require_application_io()
    ready = ctypes.c_uint32(0)
    status = int(_native.spc_io_process(ctypes.byref(ready)))
    if status != 0:
        raise error_for(status, "spc_io_process failed")
    return int(ready.value)


def io_dispatch() -> tuple[int, int]:
    """io_process(), then runs on this thread the callbacks of the responses it read, for
    delivery="application" clients (spc_io_dispatch): their event fds are not made readable for
    those. Returns (connections ready, callbacks run). For the one thread that serves io_fd()
    and dispatches the clients; other events still come through the clients' event fds."""
    _require(_native.HAS_IO_DISPATCH, "spc_io_dispatch (0.4)")
    ready, ran = ctypes.c_uint32(0), ctypes.c_uint32(0)
    status = int(_native.spc_io_dispatch(ctypes.byref(ready), ctypes.byref(ran)))
    if status != 0:
        raise error_for(status, "spc_io_dispatch failed")
    return int(ready.value), int(ran.value)


def audio_devices() -> list[AudioDevice]:
    """The ALSA capture devices, as `arecord -L` lists them (spc_audio_devices, 0.8): each
    name can be given as Microphone(device=name); the description is ALSA's (lines joined
    with newlines: the card, then what the device does). AudioError when ALSA cannot list them."""
    _require(_native.spc_audio_devices is not None, "capture device listing (0.8)")
    devices = _native.devices_p()
    status = int(_native.spc_audio_devices(ctypes.byref(devices)))
    if status != 0:
        raise error_for(status, "spc_audio_devices: ALSA could not list the capture devices")
    try:
        return [AudioDevice(_native.spc_devices_name(devices, i).decode("utf-8", "replace"),
                            _native.spc_devices_description(devices, i).decode("utf-8", "replace"))
                for i in range(int(_native.spc_devices_count(devices)))]
    finally:
        _native.spc_devices_free(devices)


def status_text(status: int) -> str:
    """The library's English text for a status ("ok", "invalid argument", ...)."""
    return _native.spc_status_str(int(status)).decode()


__all__ = [
    "Client", "Stream", "copy_segment", "Status", "LogLevel", "State", "ConnectionState", "Delivery",
    "Activation", "Listen", "VadParam", "NetworkIO", "io_fd", "io_process", "io_dispatch",
    "Segment", "Word", "Intent", "Entity", "StartEvent", "StopEvent", "ErrorEvent", "StateEvent", "ListenEvent",
    "LevelEvent", "Update",
    "Microphone", "WavFile", "PushAudio", "AudioStream", "AudioSource",
    "SpeechClientError", "InvalidArgumentError", "InvalidStateError", "NoMemoryError", "NetworkError", "TLSError",
    "SpeechTimeoutError", "AuthError", "APIError", "ParseError", "AudioError", "InternalError", "EXCEPTIONS",
    "error_for", "version", "version_number", "status_text", "audio_devices", "AudioDevice",
]
