"""The Pythonic layer: a Client owns one spc_client.

Threads. By default the library calls back on its own thread (one per client). The callbacks
given to Client (on_segment, on_error, on_start, on_stop, on_log, on_state, on_listen, on_level)
run there, in order,
one at a time; updates() and aupdates() receive the same events through a queue. With
delivery="application" no library thread enters Python: callbacks run inside dispatch(),
updates(), aupdates() and stream() (through the event fd and loop.add_reader), wait_idle() and
close(), and, with io="application", speechclient.io_dispatch(), on the calling thread.

asyncio. `async for update in client.stream():` (delivery="application") starts a context and
yields its updates until its stop event, with no thread besides the event loop's; see
Client.stream() and Stream. aupdates() consumes updates without starting anything.

Hands-free. With activation="voice" or "wakeword", one start() listens: the library's voice
activity detector opens a context per utterance (each with its StartEvent and StopEvent) until
stop() or the end of the audio, and ListenEvents report what it heard. updates(), aupdates() and
stream() then end when the client is idle again, after every context of that listening.

Exceptions in callbacks. An exception raised by one of your callbacks never reaches C (that
would abort the callback thread). The first one is kept and re-raised, once, by the next call on
the client (start, stop, push, state, wait_idle after it waited, close after it freed, ...) or by
updates()/aupdates(); later ones, until it was re-raised, are dropped.

Lifetime. close() (or leaving the `with` block) stops everything and returns after the last
callback; it is idempotent. From inside one of the client's own callbacks it raises
InvalidStateError, as the library does. A client that is garbage-collected unclosed is closed;
clients still open when the interpreter exits are closed by an atexit hook.
"""
from __future__ import annotations

import asyncio
import atexit
import collections
import ctypes
import itertools
import operator
import os
import select
import threading
import time
import weakref
from typing import (Any, AsyncIterable, AsyncIterator, Callable, Deque, Dict, Iterable, Iterator, List, Mapping,
                    Optional, Tuple, Union)

from . import _native as n
from .errors import InvalidArgumentError, InvalidStateError, SpeechClientError, SpeechTimeoutError, error_for
from .types import (AudioSource, AudioStream, Entity, ErrorEvent, Intent, LevelEvent, ListenEvent, Microphone, PushAudio, Segment,
                    StartEvent, StateEvent, StopEvent, Update, WavFile, Word)

__all__ = ["Client", "Stream", "MAX_BUFFERED_UPDATES", "copy_segment"]

#: Updates kept for updates()/aupdates() while nobody reads them; beyond that the oldest are
#: dropped (a client used only through its callbacks does not grow without bound).
MAX_BUFFERED_UPDATES = 10_000

# The longest single wait inside the library, so that Ctrl-C and close() from another thread
# are noticed.
_WAIT_SLICE_S = 0.25
# How often an iterator that has seen a stop checks whether the client became idle.
_IDLE_POLL_S = 0.02

_Buffer = Any  # bytes, bytearray, memoryview, array.array('h'), numpy int16 arrays: any buffer


# ---------------------------------------------------------------------------------------------
# Text in and out

def _text(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "replace") if b else ""


def _status_text(status: int) -> str:
    return _text(n.spc_status_str(status))


def _option_error(option: str, message: str) -> InvalidArgumentError:
    error = InvalidArgumentError(n.Status.INVALID_ARGUMENT, message)
    error.option = option.split(".")[0].split("[")[0].split(" ")[0]
    return error


def _c_string(option: str, value: Optional[str]) -> Optional[bytes]:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _option_error(option, f"{option}={value!r}: must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise _option_error(option, f"{option}={value!r}: contains a NUL character")
    return value.encode("utf-8")


def _c_path(option: str, value: Any) -> Optional[bytes]:
    if value is None:
        return None
    try:
        path = os.fsencode(value)
    except TypeError:
        raise _option_error(option, f"{option}={value!r}: must be a path, not {type(value).__name__}") from None
    if b"\0" in path:
        raise _option_error(option, f"{option}={value!r}: contains a NUL character")
    return path


def _u32(option: str, value: Any) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise _option_error(option, f"{option}={value!r}: must be an int, not {type(value).__name__}") from None
    if not 0 <= v <= 0xFFFFFFFF:
        raise _option_error(option, f"{option}={value!r}: out of range")
    return v


def _check_option(status: int, option: str, value: Any, hint: str = "", shown: Optional[str] = None) -> None:
    """A setter's status as an exception naming the option and the value (setters give no
    message of their own)."""
    if status != n.Status.OK:
        text = repr(value) if shown is None else shown
        error = error_for(status, f"{option}={text}: {_status_text(status)}" + (f" ({hint})" if hint else ""))
        error.option = option
        raise error


def _error_event(error: Any) -> ErrorEvent:
    grpc = n.spc_error_grpc_status(error)
    code = n.spc_error_code(error)
    try:
        status = n.Status(code)
    except ValueError:
        status = n.Status.INTERNAL
    return ErrorEvent(status, _text(n.spc_error_message(error)), grpc if grpc >= 0 else None)


def copy_segment(s: Any) -> Segment:
    """A Segment holding copies of everything in the spc_segment *s (valid only during its
    callback)."""
    def confidence(value: Optional[float]) -> Optional[float]:
        return round(value, 4) if value is not None and value >= 0 else None

    has_confidence = n.spc_segment_word_confidence is not None
    words = tuple(
        Word(_text(n.spc_segment_word_text(s, i)), n.spc_segment_word_index(s, i),
             n.spc_segment_word_start_ms(s, i), n.spc_segment_word_end_ms(s, i),
             bool(n.spc_segment_word_is_final(s, i)),
             confidence(n.spc_segment_word_confidence(s, i) if has_confidence else None))
        for i in range(n.spc_segment_word_count(s)))
    entities = tuple(
        Entity(_text(n.spc_segment_entity_type(s, i)), _text(n.spc_segment_entity_value(s, i)),
               n.spc_segment_entity_start(s, i), n.spc_segment_entity_end(s, i),
               bool(n.spc_segment_entity_is_final(s, i)))
        for i in range(n.spc_segment_entity_count(s)))
    intent_text = _text(n.spc_segment_intent(s))
    intent = Intent(intent_text, bool(n.spc_segment_intent_is_final(s))) if intent_text else None
    return Segment(_text(n.spc_segment_context_id(s)), n.spc_segment_id(s), bool(n.spc_segment_is_final(s)),
                   _text(n.spc_segment_transcript(s)), words, intent, entities, _text(n.spc_segment_json(s)),
                   confidence(n.spc_segment_confidence(s) if has_confidence else None))


# ---------------------------------------------------------------------------------------------
# Trampolines: one set for the process, created once and never freed, so that no C thread can
# ever call a freed ctypes thunk. user_data is an integer key; the client behind it is held
# weakly, and a callback for a client that is gone is ignored.

_clients: Dict[int, "weakref.ref[Client]"] = {}
_clients_lock = threading.Lock()
_keys = itertools.count(1)
_local = threading.local()


def _active_keys() -> List[int]:
    """Keys of the clients whose callback is running on this thread (innermost last)."""
    keys = getattr(_local, "keys", None)
    if keys is None:
        keys = _local.keys = []
    return keys


def _run_callback(key: Optional[int], body: Callable[["Client"], None]) -> None:
    try:
        ref = _clients.get(key or 0)
        client = ref() if ref is not None else None
        if client is None:
            return
        keys = _active_keys()
        keys.append(key)  # type: ignore[arg-type]
        try:
            body(client)
        except BaseException as e:  # never into C
            client._remember(e)
        finally:
            keys.pop()
    except BaseException:  # pragma: no cover - last line of defence (interpreter shutting down)
        pass


def _t_segment(_client, segment, key):
    _run_callback(key, lambda c: c._emit(copy_segment(segment), "segment"))


def _t_error(_client, error, key):
    _run_callback(key, lambda c: c._emit(_error_event(error), "error"))


def _t_start(_client, context_id, key):
    _run_callback(key, lambda c: c._emit(StartEvent(_text(context_id)), "start"))


def _t_stop(_client, context_id, key):
    _run_callback(key, lambda c: c._emit(StopEvent(_text(context_id)), "stop"))


def _t_log(_client, level, message, key):
    _run_callback(key, lambda c: c._log(level, _text(message)))


def _t_state(_client, state, attempt, delay_ms, reason, key):
    def body(c: "Client") -> None:
        try:
            cs = n.ConnectionState(state)
        except ValueError:
            cs = state
        c._emit(StateEvent(cs, attempt, delay_ms, _error_event(reason) if reason else None), "state")
    _run_callback(key, body)


def _t_listen(client, event, position_ms, key):
    # What an activation heard (0.8): valid only during this callback, so read it here.
    heard = n.spc_listen_name(client) if n.spc_listen_name is not None else None
    name = heard.decode("utf-8", "replace") if heard is not None else None

    def body(c: "Client") -> None:
        try:
            kind = n.Listen(event)
        except ValueError:  # an event newer than this binding
            kind = event
        c._emit(ListenEvent(kind, int(position_ms), name), "listen")
    _run_callback(key, body)


def _t_level(_client, level_dbfs, position_ms, key):
    _run_callback(key, lambda c: c._emit(LevelEvent(float(level_dbfs), int(position_ms)), "level"))


_TRAMPOLINES = (n.SEGMENT_CB(_t_segment), n.ERROR_CB(_t_error), n.START_CB(_t_start), n.STOP_CB(_t_stop),
                n.LOG_CB(_t_log), n.STATE_CB(_t_state), n.LISTEN_CB(_t_listen), n.LEVEL_CB(_t_level))

# The voice activity detector's tunables by keyword, with the ranges the header gives.
_VAD_RANGES = {
    n.VadParam.SNR_DB: "0-60 dB",
    n.VadParam.NOISE_GATE_DB: "-100-0 dBFS",
    n.VadParam.NOISE_LEARN_HALFTIME_MS: "20-60000 ms",
    n.VadParam.WINDOW_FRAMES: "a whole number of frames, 1-100",
    n.VadParam.ACTIVATION_RATIO: "0.01-1",
    n.VadParam.RELEASE_RATIO: "0-1, below activation_ratio",
    n.VadParam.HOLD_MS: "0-10000 ms",
}
_ACTIVATIONS = {"manual": n.Activation.MANUAL, "voice": n.Activation.VOICE, "wakeword": n.Activation.WAKEWORD}


def _activation(activation: Any, wakeword: Optional[str], wakeword_url: Optional[str] = None) -> n.Activation:
    if activation is None:  # a wakeword (or a wake-word service) alone asks for wakeword listening
        return n.Activation.WAKEWORD if wakeword is not None or wakeword_url is not None else n.Activation.MANUAL
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise _option_error("activation", f"activation={activation!r}: must be 'manual', 'voice' or 'wakeword'")
        return _ACTIVATIONS[activation]
    try:
        return n.Activation(activation)
    except (ValueError, TypeError):
        raise _option_error("activation", f"activation={activation!r}: must be 'manual', 'voice' or 'wakeword'"
                            ) from None


def _vad_settings(vad: Any) -> List[Tuple[n.VadParam, str, float, Any]]:
    """vad={name or VadParam: number} as (param, name, value, value as given), checked before the
    library sees them: the library takes any double (a window of 2.5 frames included)."""
    if not isinstance(vad, Mapping):
        raise _option_error("vad", f"vad={vad!r}: must be a mapping such as {{'snr_db': 6}}")
    settings = []
    for key, value in vad.items():
        try:
            param = key if isinstance(key, n.VadParam) else n.VadParam[key.upper()]
        except (KeyError, AttributeError):
            names = ", ".join(p.name.lower() for p in n.VadParam)
            raise _option_error("vad", f"vad[{key!r}]: not a detector tunable (one of {names})") from None
        name = param.name.lower()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _option_error("vad", f"vad[{name!r}]={value!r}: must be a number, not {type(value).__name__}")
        try:
            number = float(value)
        except OverflowError:
            raise _option_error("vad", f"vad[{name!r}]={value!r}: out of range ({_VAD_RANGES[param]})") from None
        if param == n.VadParam.WINDOW_FRAMES and not number.is_integer():
            raise _option_error("vad", f"vad[{name!r}]={value!r}: must be a whole number of frames")
        settings.append((param, name, number, value))
    return settings


@atexit.register
def _close_all_at_exit() -> None:
    # Library threads must not call into an interpreter that is finalizing.
    with _clients_lock:
        live = [r() for r in _clients.values()]
    for c in live:
        if c is not None:
            try:
                c.close()
            except BaseException:
                pass


def _defer_free(handle: Any) -> None:
    """Frees a handle from a fresh thread: for a client collected on its own callback thread,
    where the library refuses spc_client_free()."""
    threading.Thread(target=n.spc_client_free, args=(handle,), name="speechclient-free", daemon=True).start()


_QueueItem = Union[Update, object]
_WAKE = object()  # put into asyncio queues to make aupdates() look at the client again
# An aupdates() or stream() iterator: its loop, its queue (anything with put_nowait), and the
# thread running the loop.
_Sink = Tuple[asyncio.AbstractEventLoop, Any, int]
# A loop.add_reader on the event fd: the loop, the fd, and the loop's thread.
_Reader = Tuple[asyncio.AbstractEventLoop, int, int]


# ---------------------------------------------------------------------------------------------

class Client:
    """A streaming recognition client: an audio source, a connection to a server speaking the
    Speechly SLU protocol, and the updates that report what was heard.

        with Client(url="grpc://127.0.0.1:50051", app_id="demo", audio=WavFile("speech.wav")) as c:
            c.start()
            for update in c.updates():
                if isinstance(update, Segment) and update.final:
                    print(update.transcript)

    Options are those of the C header (include/speechclient.h); a rejected option raises
    InvalidArgumentError naming it and its value. `audio` is Microphone(device="default"),
    WavFile(path), PushAudio(sample_rate, channels) or AudioStream(fd, sample_rate, channels) (a pipe
    or standard input, libspeechclient 0.9). `context_options` maps a key to a value
    or to several. `reconnect` is (max_attempts, initial_delay_ms, max_delay_ms). `delivery` is
    "thread" (the library's callback thread) or "application" (see the module documentation).
    `io` is "library" (the network thread reads the connection) or "application" (libspeechclient
    0.3: speechclient.io_process() reads it, called when speechclient.io_fd() is readable; see
    APPLICATION-DRIVEN NETWORK I/O in the header).

    With asyncio and delivery="application", `async for update in client.stream():` starts a
    context and yields its updates, the event loop running the callbacks (see stream()).

    Hands-free listening (libspeechclient 0.2; see HANDS-FREE LISTENING in the header):
    `activation` is "manual" (the default: each start() opens one context), "voice" (start()
    listens and the voice activity detector opens a context per utterance, until stop() or the
    end of the audio) or "wakeword" (as "voice", delivering a context's segments only from the one
    that holds `wakeword`, a phrase of 1 to 8 words); an Activation member works too. Giving
    `wakeword` without `activation` means "wakeword"; activation="wakeword" without one makes the
    library refuse the client (InvalidArgumentError). `wakeword_url` (libspeechclient 0.7): a
    Wyoming wake-word service ("wyoming://127.0.0.1:10400") hears the audio instead and each of
    its detections opens a context; `wakeword` then names its wake word (a model name or prefix,
    "hey_jarvis"; None: any). `vad` tunes the detector:
    {"snr_db": 6, "hold_ms": 400, ...}, keys the VadParam names in lower case (or VadParam
    members), each value a number in the header's range. `endpointing` is (pre_roll_ms,
    trailing_silence_ms, min_activation_ms, max_activation_ms). The listening reports
    ListenEvent updates; `levels=True` adds a LevelEvent (dBFS) for each chunk of audio taken in,
    in every mode.

    Callbacks: on_segment(Segment), on_error(ErrorEvent), on_start(StartEvent),
    on_stop(StopEvent), on_state(StateEvent), on_listen(ListenEvent), on_level(LevelEvent)
    (giving it implies levels=True), on_log(LogLevel, str). See the module documentation for
    their thread and for exceptions they raise.
    """

    def __init__(self, url: str, app_id: Optional[str] = None, *, project_id: Optional[str] = None,
                 language: str = "en-US", model: Optional[str] = None,
                 headers: Optional[Union[Mapping[str, str], Iterable[Tuple[str, str]]]] = None,
                 device_id: Optional[str] = None,
                 cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
                 ca_file: Optional[Union[str, "os.PathLike[str]"]] = None, insecure_tls: bool = False,
                 audio: AudioSource = Microphone(device="default"), chunk_ms: int = 100,
                 prepare_on_init: bool = False,
                 context_options: Optional[Mapping[str, Union[str, Iterable[str]]]] = None,
                 log_level: n.LogLevel = n.LogLevel.WARNING, identity_url: Optional[str] = None,
                 reconnect: Optional[Tuple[int, int, int]] = None, replay_buffer_ms: Optional[int] = None,
                 context_limit_ms: Optional[int] = None, stream_budget: Optional[int] = None,
                 drain_timeout_ms: Optional[int] = None, keepalive: Optional[Tuple[int, int]] = None,
                 push_wait_ms: Optional[int] = None, timeouts: Optional[Tuple[int, int, int]] = None,
                 delivery: Union[str, n.Delivery] = "thread",
                 io: Union[str, n.NetworkIO] = "library",
                 activation: Optional[Union[str, n.Activation]] = None, wakeword: Optional[str] = None,
                 wakeword_url: Optional[str] = None,
                 vad: Optional[Mapping[Union[str, n.VadParam], float]] = None,
                 endpointing: Optional[Tuple[int, int, int, int]] = None, levels: bool = False,
                 on_segment: Optional[Callable[[Segment], Any]] = None,
                 on_error: Optional[Callable[[ErrorEvent], Any]] = None,
                 on_start: Optional[Callable[[StartEvent], Any]] = None,
                 on_stop: Optional[Callable[[StopEvent], Any]] = None,
                 on_log: Optional[Callable[[n.LogLevel, str], Any]] = None,
                 on_state: Optional[Callable[[StateEvent], Any]] = None,
                 on_listen: Optional[Callable[[ListenEvent], Any]] = None,
                 on_level: Optional[Callable[[LevelEvent], Any]] = None):
        # Everything close() and __del__ touch exists before anything can fail.
        self._handle: Optional[Any] = None
        self._key = next(_keys)
        self._cond = threading.Condition(threading.Lock())
        self._busy = 0
        self._closing = False
        self._callback_error: Optional[BaseException] = None
        self._queue: Deque[Update] = collections.deque(maxlen=MAX_BUFFERED_UPDATES)
        self._async_sinks: List[_Sink] = []
        self._readers: List[_Reader] = []
        self._stream_sink: Optional[_Sink] = None  # the running stream()'s, at most one
        # Contexts whose stream() was left before their stop event: until those stop events,
        # updates go to the shared queue (for updates()/aupdates()), never to a later stream().
        self._abandoned = 0
        self._callbacks: Dict[str, Optional[Callable[..., Any]]] = {
            "segment": on_segment, "error": on_error, "start": on_start, "stop": on_stop, "state": on_state,
            "log": on_log, "listen": on_listen, "level": on_level}
        # Hands-free starts made, and how many of them an iterator has seen end: listening can end
        # without any context (so without a StopEvent) and the iterators must still end.
        self._listens_started = 0
        self._listens_seen = 0
        # A stream() left early while listening: the rest of that listening goes to the shared
        # queue, and the next stream() waits for it to end first.
        self._abandoned_listen = False
        # The process-wide trampolines, referenced here too: the client relies on them.
        self._trampolines = _TRAMPOLINES

        if isinstance(delivery, str):
            if delivery not in ("thread", "application"):
                raise _option_error("delivery", f"delivery={delivery!r}: must be 'thread' or 'application'")
            delivery = n.Delivery.APPLICATION if delivery == "application" else n.Delivery.THREAD
        self.delivery: n.Delivery = n.Delivery(delivery)
        try:
            self.io: n.NetworkIO = n.NetworkIO[io.upper()] if isinstance(io, str) else n.NetworkIO(io)
        except (KeyError, ValueError, TypeError):
            raise _option_error("io", f"io={io!r}: must be 'library' or 'application'") from None
        if self.io != n.NetworkIO.LIBRARY and not n.HAS_APPLICATION_IO:
            raise _option_error("io", f"io='application': {n.LIBRARY_PATH} is libspeechclient {n.LOADED_VERSION}, "
                                      f"without application-driven network I/O (0.3)")
        if not n.HAS_CONNECTION_SETTINGS:
            for name, wanted in (("stream_budget", stream_budget is not None),
                                 ("drain_timeout_ms", drain_timeout_ms is not None),
                                 ("keepalive", keepalive is not None),
                                 ("push_wait_ms", push_wait_ms is not None),
                                 ("reconnect", reconnect is not None and reconnect[0] is None)):
                if wanted:
                    raise _option_error(name, f"{name}: {n.LIBRARY_PATH} is libspeechclient {n.LOADED_VERSION}, "
                                              f"without stream budgets, drain timeouts, keepalive settings and "
                                              f"unlimited reconnection (0.5)")
        if timeouts is not None and n.spc_options_set_timeouts is None:
            raise _option_error("timeouts", f"timeouts: {n.LIBRARY_PATH} is libspeechclient {n.LOADED_VERSION}, "
                                            f"without connect, login and start timeouts (0.8)")
        self.activation: n.Activation = _activation(activation, wakeword, wakeword_url)
        if wakeword_url is not None and n.spc_options_set_wakeword_url is None:
            # Named before the hands-free options it implies: it is what the library lacks last.
            raise _option_error("wakeword_url", f"wakeword_url: {n.LIBRARY_PATH} is libspeechclient "
                                                f"{n.LOADED_VERSION}, without wake-word services (0.7)")
        levels = bool(levels) or on_level is not None
        if not n.HAS_HANDS_FREE:
            # The wakeword first: given alone it is what asked for wakeword listening.
            for name, wanted in (("wakeword", wakeword is not None),
                                 ("activation", self.activation != n.Activation.MANUAL), ("vad", vad is not None),
                                 ("endpointing", endpointing is not None), ("levels", levels)):
                if wanted:
                    raise _option_error(name, f"{name}: {n.LIBRARY_PATH} is libspeechclient {n.LOADED_VERSION}, "
                                              f"without hands-free listening and levels (0.2)")
        vad_settings = _vad_settings(vad) if vad is not None else []
        if endpointing is not None:
            try:
                pre_roll, trailing, shortest, longest = endpointing
            except (TypeError, ValueError):
                raise _option_error("endpointing", f"endpointing={endpointing!r}: must be (pre_roll_ms, "
                                                   f"trailing_silence_ms, min_activation_ms, max_activation_ms)"
                                    ) from None
            endpointing = tuple(_u32("endpointing", v) for v in (pre_roll, trailing, shortest, longest))
        if not isinstance(audio, (Microphone, WavFile, PushAudio, AudioStream)):
            raise _option_error("audio", f"audio={audio!r}: must be Microphone(), WavFile(path), PushAudio(rate, channels) "
                                         f"or AudioStream(fd, rate, channels)")
        if isinstance(audio, AudioStream) and n.spc_options_set_audio_fd is None:
            raise _option_error("audio", f"audio=AudioStream: {n.LIBRARY_PATH} is libspeechclient {n.LOADED_VERSION}, "
                                         f"without audio from a file descriptor (0.9)")
        self.audio: AudioSource = audio
        self._channels = 1
        self._push_lock = threading.Lock()
        self._push_rest = b""  # the part of a frame the last push() left over
        self.url = url

        opts = n.spc_options_new()
        if not opts:
            raise error_for(n.Status.NO_MEMORY, "spc_options_new: out of memory")
        try:
            _check_option(n.spc_options_set_server_url(opts, _c_string("url", url)), "url", url,
                          "grpc://host[:port] or grpc+tls://host[:port]")
            if identity_url is not None:
                _check_option(n.spc_options_set_identity_url(opts, _c_string("identity_url", identity_url)),
                              "identity_url", identity_url)
            if app_id is not None:
                _check_option(n.spc_options_set_app_id(opts, _c_string("app_id", app_id)), "app_id", app_id)
            if project_id is not None:
                _check_option(n.spc_options_set_project_id(opts, _c_string("project_id", project_id)),
                              "project_id", project_id)
            _check_option(n.spc_options_set_language(opts, _c_string("language", language)), "language", language,
                          "a BCP-47 tag such as en-US")
            if model is not None:
                if n.spc_options_set_model is None:
                    raise _option_error("model", f"model: {n.LIBRARY_PATH} is libspeechclient {n.LOADED_VERSION}, "
                                                 f"without model selection (0.6)")
                _check_option(n.spc_options_set_model(opts, _c_string("model", model)), "model", model,
                              "1-256 characters without spaces or control characters")
            if headers is not None:
                if n.spc_options_add_header is None:
                    raise _option_error("headers", f"headers: {n.LIBRARY_PATH} is libspeechclient {n.LOADED_VERSION}, "
                                                   f"without request headers (0.6)")
                pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
                for name, value in pairs:
                    _check_option(n.spc_options_add_header(opts, _c_string("headers", name), _c_string("headers", value)),
                                  "headers", (name, value), "a token name and a printable ASCII value")
            if device_id is not None:
                _check_option(n.spc_options_set_device_id(opts, _c_string("device_id", device_id)), "device_id",
                              device_id, "a UUID")
            if cache_dir is not None:
                _check_option(n.spc_options_set_cache_dir(opts, _c_path("cache_dir", cache_dir)), "cache_dir",
                              os.fspath(cache_dir))
            if ca_file is not None:
                _check_option(n.spc_options_set_ca_file(opts, _c_path("ca_file", ca_file)), "ca_file",
                              os.fspath(ca_file))
            _check_option(n.spc_options_set_insecure_tls(opts, 1 if insecure_tls else 0), "insecure_tls",
                          insecure_tls)
            if isinstance(audio, Microphone):
                _check_option(n.spc_options_set_audio_microphone(opts, _c_string("audio.device", audio.device)),
                              "audio", None, shown=f"Microphone(device={audio.device!r})")
            elif isinstance(audio, WavFile):
                _check_option(n.spc_options_set_audio_file(opts, _c_path("audio.path", audio.path)), "audio", None,
                              shown=f"WavFile({os.fspath(audio.path)!r})")
            elif isinstance(audio, AudioStream):
                if not isinstance(audio.fd, int) or isinstance(audio.fd, bool) or not 0 <= audio.fd <= 0x7FFFFFFF:
                    raise _option_error("audio", f"audio={audio!r}: fd must be an open file descriptor (an int >= 0)")
                rate = _u32("audio.sample_rate", audio.sample_rate)
                channels = _u32("audio.channels", audio.channels)
                _check_option(n.spc_options_set_audio_fd(opts, audio.fd, rate, channels), "audio", None,
                              "fd >= 0; sample_rate 0 (a WAV stream) with channels 0, or 8000-192000 Hz with 1-8 channels",
                              shown=f"AudioStream(fd={audio.fd}, sample_rate={rate}, channels={channels})")
            else:
                rate = _u32("audio.sample_rate", audio.sample_rate)
                channels = _u32("audio.channels", audio.channels)
                _check_option(n.spc_options_set_audio_push(opts, rate, channels), "audio", None,
                              "push format: 8000-192000 Hz, 1-8 channels",
                              shown=f"PushAudio(sample_rate={rate}, channels={channels})")
                self._channels = channels
            _check_option(n.spc_options_set_chunk_ms(opts, _u32("chunk_ms", chunk_ms)), "chunk_ms", chunk_ms,
                          "20-1000 ms")
            _check_option(n.spc_options_set_prepare_on_init(opts, 1 if prepare_on_init else 0), "prepare_on_init",
                          prepare_on_init)
            for key, values in (context_options or {}).items():
                for value in ([values] if isinstance(values, str) else list(values)):
                    _check_option(n.spc_options_add_context_option(opts, _c_string("context_options key", key),
                                                                   _c_string(f"context_options[{key!r}]", value)),
                                  f"context_options[{key!r}]", value)
            try:
                level = n.LogLevel(log_level)
            except ValueError:
                raise _option_error("log_level", f"log_level={log_level!r}: not a LogLevel") from None
            _check_option(n.spc_options_set_log_level(opts, level), "log_level", level)
            if reconnect is not None:
                attempts, initial, maximum = reconnect
                # None: never give up (SPC_RECONNECT_UNLIMITED).
                raw_attempts = n.SPC_RECONNECT_UNLIMITED if attempts is None else _u32("reconnect", attempts)
                _check_option(n.spc_options_set_reconnect(opts, raw_attempts, _u32("reconnect", initial),
                                                          _u32("reconnect", maximum)),
                              "reconnect", (attempts, initial, maximum),
                              "max_attempts 0-100 or None (unlimited), initial_delay_ms 1-60000, "
                              "max_delay_ms initial-600000")
            # The options that take one number: (keyword, value, setter, the rule it is checked against).
            for name, value, setter, rule in (
                    ("replay_buffer_ms", replay_buffer_ms, n.spc_options_set_replay_buffer_ms, "1000-600000 ms"),
                    ("context_limit_ms", context_limit_ms, n.spc_options_set_context_limit_ms, "1000-3600000 ms"),
                    ("stream_budget", stream_budget, n.spc_options_set_stream_budget, "65536-1073741824 bytes"),
                    ("drain_timeout_ms", drain_timeout_ms, n.spc_options_set_drain_timeout_ms, "100-600000 ms"),
                    ("push_wait_ms", push_wait_ms, n.spc_options_set_push_wait_ms, "0-3600000 ms")):
                if value is not None:
                    _check_option(setter(opts, _u32(name, value)), name, value, rule)
            if keepalive is not None:
                try:
                    interval, timeout = keepalive
                except (TypeError, ValueError):
                    raise _option_error("keepalive", f"keepalive={keepalive!r}: must be (interval_ms, timeout_ms)") from None
                _check_option(n.spc_options_set_keepalive(opts, _u32("keepalive", interval), _u32("keepalive", timeout)),
                              "keepalive", (interval, timeout), "interval_ms 0 (off) or 1000-3600000, timeout_ms 100-600000")
            if timeouts is not None:
                try:
                    connect, login, start = timeouts
                except (TypeError, ValueError):
                    raise _option_error("timeouts", f"timeouts={timeouts!r}: must be (connect_ms, login_ms, start_ms)") from None
                _check_option(n.spc_options_set_timeouts(opts, _u32("timeouts", connect), _u32("timeouts", login),
                                                         _u32("timeouts", start)),
                              "timeouts", (connect, login, start), "100-600000 ms each")
            if n.spc_options_set_delivery is not None:
                _check_option(n.spc_options_set_delivery(opts, int(self.delivery)), "delivery",
                              self.delivery.name.lower())
            elif self.delivery != n.Delivery.THREAD:
                raise _option_error("delivery", f"delivery='application': {n.LIBRARY_PATH} does not have "
                                                f"spc_options_set_delivery")

            if n.HAS_APPLICATION_IO:
                _check_option(n.spc_options_set_io(opts, int(self.io)), "io", self.io.name.lower())

            if n.HAS_HANDS_FREE:
                _check_option(n.spc_options_set_activation(opts, int(self.activation)), "activation",
                              self.activation.name.lower())
                if wakeword_url is not None:
                    _check_option(n.spc_options_set_wakeword_url(
                        opts, _c_string("wakeword_url", wakeword_url),
                        None if wakeword is None else _c_string("wakeword", wakeword)), "wakeword_url", wakeword_url,
                        "wyoming://HOST:PORT or wyoming+unix:///PATH, and a wake word name of letters, digits, '_', '-', '.'")
                elif wakeword is not None:
                    _check_option(n.spc_options_set_wakeword(opts, _c_string("wakeword", wakeword)), "wakeword",
                                  wakeword, "1 to 8 words, at most 256 bytes")
                # Setters see one tunable at a time, so a pair of ratios may be refused in one order
                # (release not below the activation ratio meanwhile): a refused one is tried again
                # once after the others.
                refused = []
                for param, name, value, given in vad_settings:
                    if n.spc_options_set_vad(opts, int(param), value) != n.Status.OK:
                        refused.append((param, name, value, given))
                for param, name, value, given in refused:
                    try:
                        _check_option(n.spc_options_set_vad(opts, int(param), value), f"vad[{name!r}]", given,
                                      _VAD_RANGES[param])
                    except SpeechClientError as e:
                        e.option = "vad"
                        raise
                if endpointing is not None:
                    _check_option(n.spc_options_set_endpointing(opts, *endpointing), "endpointing", endpointing,
                                  "pre_roll_ms 0-5000, trailing_silence_ms 100-60000, min_activation_ms 0-60000, "
                                  "max_activation_ms max(min_activation_ms, 500)-3600000")

            segment_cb, error_cb, start_cb, stop_cb, log_cb, state_cb, listen_cb, level_cb = _TRAMPOLINES
            ud = ctypes.c_void_p(self._key)
            for setter, cb, name in ((n.spc_options_set_segment_cb, segment_cb, "segment"),
                                     (n.spc_options_set_error_cb, error_cb, "error"),
                                     (n.spc_options_set_start_cb, start_cb, "start"),
                                     (n.spc_options_set_stop_cb, stop_cb, "stop"),
                                     (n.spc_options_set_state_cb, state_cb, "state"),
                                     (n.spc_options_set_listen_cb, listen_cb, "listen")):
                if setter is not None:  # the state and listen callbacks need a library that has them
                    _check_option(setter(opts, cb, ud), f"{name} callback", name)
            if on_log is not None:  # log lines cost a trip into Python only when wanted
                _check_option(n.spc_options_set_log_cb(opts, log_cb, ud), "log callback", "log")
            if levels:  # the library measures levels only for a callback
                _check_option(n.spc_options_set_level_cb(opts, level_cb, ud), "level callback", "level")

            with _clients_lock:
                _clients[self._key] = weakref.ref(self)
            handle = n.client_p()
            err = n.error_p()
            status = n.spc_client_new(opts, ctypes.byref(handle), ctypes.byref(err))
            if status != n.Status.OK:
                with _clients_lock:
                    _clients.pop(self._key, None)
                event = _error_event(err) if err else None
                n.spc_error_free(err)
                raise error_for(status, event.message if event and event.message else _status_text(status),
                                event.grpc_status if event else None)
            self._handle = handle
        finally:
            n.spc_options_free(opts)

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            # Already failing: free, but do not hide that exception behind a callback's.
            self._close(quiet=False)

    def __del__(self) -> None:
        try:
            self._close(quiet=True)
        except BaseException:
            pass

    def __repr__(self) -> str:
        if self._handle is None:
            return f"<speechclient.Client {self.url!r} closed>"
        return f"<speechclient.Client {self.url!r} audio={self.audio!r}>"

    @property
    def closed(self) -> bool:
        return self._handle is None

    def close(self) -> None:
        """Stops everything and frees the client; returns after its last callback has returned.
        Idempotent. Raises InvalidStateError from inside one of the client's own callbacks (the
        client stays open), and, after freeing, an exception a callback raised that was not
        re-raised yet."""
        self._close(quiet=False)
        self._raise_callback_error()

    def _close(self, quiet: bool) -> None:
        handle = self._handle
        if handle is None:
            return
        if self._in_own_callback():
            # The handle stays valid here: a free on another thread waits for this callback.
            status = n.spc_client_free(handle)
            if status == n.Status.OK:  # pragma: no cover - the library promises to refuse
                self._forget_handle()
            elif quiet:  # collected on its own callback thread: free from another thread
                _defer_free(handle)
                self._forget_handle()
            else:
                raise error_for(status, f"close() from inside one of the client's own callbacks: "
                                        f"{_status_text(status)}")
            return
        with self._cond:
            if self._closing:  # another thread is closing it: wait until it is done
                while self._handle is not None and self._closing:
                    self._cond.wait()
                return
            if self._handle is None:
                return
            self._closing = True
            try:
                while self._busy:  # calls from other threads return first
                    self._cond.wait()
            except BaseException:
                self._closing = False
                self._cond.notify_all()
                raise
        self._remove_readers()
        status = n.spc_client_free(handle)
        if status == n.Status.OK:
            self._forget_handle()
            return
        with self._cond:
            self._closing = False
            self._cond.notify_all()
        if quiet:
            _defer_free(handle)
            self._forget_handle()
        else:
            raise error_for(status, f"close(): {_status_text(status)}")

    def _forget_handle(self) -> None:
        with self._cond:
            self._handle = None
            self._closing = False
            self._cond.notify_all()
            sinks = self._sinks()
        with _clients_lock:
            _clients.pop(self._key, None)
        for sink in sinks:
            self._put_async(sink, _WAKE)

    def _remove_readers(self) -> None:
        with self._cond:
            readers, self._readers = self._readers, []
        for loop, fd, thread in readers:
            try:
                if loop.is_closed():
                    continue
                if thread == threading.get_ident():
                    loop.remove_reader(fd)
                else:
                    loop.call_soon_threadsafe(loop.remove_reader, fd)
            except Exception:
                pass

    # -- calls --------------------------------------------------------------------------------

    def _in_own_callback(self) -> bool:
        return self._key in _active_keys()

    def _enter(self) -> Any:
        """The handle, counted busy until _leave(), so close() waits for the call to return."""
        self._raise_callback_error()
        with self._cond:
            if self._handle is None or (self._closing and not self._in_own_callback()):
                raise InvalidStateError(n.Status.INVALID_STATE, "the client is closed")
            self._busy += 1
            return self._handle

    def _leave(self) -> None:
        with self._cond:
            self._busy -= 1
            if self._busy == 0:
                self._cond.notify_all()

    def _call(self, what: str, fn: Callable[..., int], *args: Any) -> None:
        handle = self._enter()
        try:
            status = fn(handle, *args)
            if status != n.Status.OK:
                message = f"{what}: {_status_text(status)}"
                if status == n.Status.INVALID_STATE:
                    state = n.c_state()
                    if n.spc_client_get_state(handle, ctypes.byref(state)) == n.Status.OK:
                        message += f" (the client is {_state_name(state.value)})"
                raise error_for(status, message)
        finally:
            self._leave()

    def start(self) -> None:
        """Requests a new audio context (see spc_client_start): the start event follows, or an
        error event and a stop event. InvalidStateError unless IDLE (or STOPPING: then queued).
        With activation "voice" or "wakeword" it begins listening instead (contexts open as the
        user speaks) until stop() or the end of the audio."""
        self._call("start()", n.spc_client_start)
        if self.activation != n.Activation.MANUAL:
            with self._cond:
                self._listens_started += 1

    def stop(self) -> None:
        """Requests the end of the current context; the stop event follows its last result.
        While listening hands-free: ends the activation in progress and the listening."""
        self._call("stop()", n.spc_client_stop)

    def suspend(self) -> None:
        """Closes the microphone and the connections, keeping the login."""
        self._call("suspend()", n.spc_client_suspend)

    def resume(self) -> None:
        """Leaves SUSPENDED."""
        self._call("resume()", n.spc_client_resume)

    @property
    def connection_state(self) -> n.ConnectionState:
        """The connection state now (spc_client_get_connection_state, libspeechclient 0.8): the
        last one the library reported, perhaps not delivered to on_state yet; IDLE before the
        first connection attempt. InvalidStateError on an older library."""
        if n.spc_client_get_connection_state is None:
            raise InvalidStateError(n.Status.INVALID_STATE, f"{n.LIBRARY_PATH} is libspeechclient {n.LOADED_VERSION}, "
                                                          f"without the connection state on demand (0.8)")
        out = ctypes.c_int(0)
        self._call("connection_state", n.spc_client_get_connection_state, ctypes.byref(out))
        try:
            return n.ConnectionState(out.value)
        except ValueError:  # pragma: no cover - a state newer than this binding
            return out.value  # type: ignore[return-value]

    @property
    def state(self) -> n.State:
        """The client's State (IDLE, STARTING, LISTENING, STOPPING, SUSPENDED)."""
        out = n.c_state()
        self._call("state", n.spc_client_get_state, ctypes.byref(out))
        try:
            return n.State(out.value)
        except ValueError:  # pragma: no cover - a state newer than this binding
            return out.value  # type: ignore[return-value]

    def push(self, samples: _Buffer) -> None:
        """Pushes interleaved signed 16-bit samples to a PushAudio client: bytes, bytearray or
        memoryview (native byte order), array.array('h'), a numpy int16 array, or any buffer of
        format 'h'. The sample count must be a whole number of frames. bytes and writable
        contiguous buffers reach the library without a copy; others are copied once (the library
        copies what it is given before returning). Samples pushed outside a context are dropped.
        InvalidStateError for a client whose audio is not PushAudio."""
        try:
            mv = memoryview(samples)
        except TypeError:
            raise InvalidArgumentError(n.Status.INVALID_ARGUMENT,
                                       f"push(): samples must be a buffer of 16-bit samples, "
                                       f"not {type(samples).__name__}") from None
        fmt = mv.format
        if not ((fmt in ("h", "<h", "=h", "@h") and mv.itemsize == 2) or
                (fmt in ("B", "b", "c") and mv.itemsize == 1)):
            raise InvalidArgumentError(n.Status.INVALID_ARGUMENT,
                                       f"push(): samples must be signed 16-bit (buffer format 'h') or raw bytes, "
                                       f"not format {fmt!r}")
        nbytes = mv.nbytes
        frame_bytes = 2 * self._channels
        with self._push_lock:
            if self._push_rest or nbytes % frame_bytes:
                # Part of a frame (an odd byte, a sample of a stereo pair, as a pipe or a socket
                # hands them out) waits for the next push, instead of failing this one.
                data = self._push_rest + mv.tobytes()
                mv.release()
                whole = len(data) - len(data) % frame_bytes
                before, self._push_rest = self._push_rest, data[whole:]
                try:
                    self._push_bytes(data[:whole], whole // frame_bytes)
                except BaseException:
                    self._push_rest = before  # nothing of this call was taken
                    raise
                return
        self._push_view(samples, mv, nbytes // 2, nbytes // frame_bytes)

    def _push_bytes(self, data: bytes, frames: int) -> None:
        status = self._push_status(ctypes.cast(ctypes.c_char_p(data), ctypes.POINTER(ctypes.c_int16)) if frames else None,
                                   frames)
        self._raise_push(status)

    def _raise_push(self, status: int) -> None:
        if status != n.Status.OK:
            raise error_for(status, f"push(): {_status_text(status)}" + (
                f" (the client's audio is {type(self.audio).__name__}, not PushAudio)"
                if status == n.Status.INVALID_STATE and not isinstance(self.audio, PushAudio) else ""))

    def _push_view(self, samples: Any, mv: memoryview, count: int, frames: int) -> None:
        if count == 0:
            status = self._push_status(None, 0)
        elif isinstance(samples, bytes) or not mv.c_contiguous:
            # Immutable bytes are read in place; a strided buffer is made contiguous (one copy).
            data = samples if isinstance(samples, bytes) else mv.tobytes()
            status = self._push_status(ctypes.cast(ctypes.c_char_p(data), ctypes.POINTER(ctypes.c_int16)), frames)
        elif mv.readonly:
            status = self._push_status((ctypes.c_int16 * count).from_buffer_copy(mv), frames)  # one copy
        else:
            status = self._push_status((ctypes.c_int16 * count).from_buffer(mv), frames)  # no copy
        mv.release()  # fails if the library's view were still exported; it is not
        self._raise_push(status)

    def _push_status(self, data: Any, frames: int) -> int:
        handle = self._enter()
        try:
            return n.spc_client_push_audio(handle, data, frames)
        finally:
            self._leave()

    def push_end(self) -> None:
        """Marks the end of the pushed audio: the context stops by itself, as a WAV file's does.
        A partial frame kept from the last push() is dropped."""
        with self._push_lock:
            self._push_rest = b""
        self._call("push_end()", n.spc_client_push_end)

    def wait_idle(self, timeout: Optional[float] = None) -> bool:
        """Waits until the client is IDLE or SUSPENDED with no start queued and every callback for
        the events so far has returned: True; or until `timeout` seconds passed: False. Then
        re-raises an exception a callback raised. InvalidStateError from inside a callback. With
        delivery="application" it runs the pending callbacks itself while it waits."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        app = self.delivery == n.Delivery.APPLICATION
        while True:
            left = _WAIT_SLICE_S if deadline is None else min(_WAIT_SLICE_S, deadline - time.monotonic())
            if app:
                idle = self._dispatch_all() == 0 and self._wait_idle_once(0) and self._dispatch_all() == 0
            else:
                idle = self._wait_idle_once(max(0, int(left * 1000)))
            if idle:
                self._raise_callback_error()
                return True
            if deadline is not None and time.monotonic() >= deadline:
                self._raise_callback_error()
                return False
            if app:
                self._wait_event_fd(max(0.0, min(left, _IDLE_POLL_S)))

    def _wait_idle_once(self, ms: int) -> bool:
        handle = self._enter()
        try:
            status = n.spc_client_wait_idle(handle, ms)
        finally:
            self._leave()
        if status == n.Status.TIMEOUT:
            return False
        if status != n.Status.OK:
            where = " from inside one of the client's own callbacks" if self._in_own_callback() else ""
            raise error_for(status, f"wait_idle(){where}: {_status_text(status)}")
        return True

    # -- application delivery -----------------------------------------------------------------

    @property
    def event_fd(self) -> int:
        """With delivery="application": a descriptor readable while events are pending (owned by
        the client: do not read, write or close it); -1 otherwise."""
        handle = self._enter()
        try:
            return n.spc_client_event_fd(handle) if n.spc_client_event_fd is not None else -1
        finally:
            self._leave()

    def dispatch(self, max_events: int = 0) -> int:
        """With delivery="application": runs up to max_events pending callbacks (0: all) on this
        thread and returns how many ran. InvalidStateError with thread delivery."""
        if n.spc_client_dispatch is None:
            self._enter()
            self._leave()
            raise InvalidStateError(n.Status.INVALID_STATE, "dispatch(): the library delivers on its own thread only")
        ran = ctypes.c_uint32(0)
        self._call("dispatch()", n.spc_client_dispatch, _u32("max_events", max_events), ctypes.byref(ran))
        return ran.value

    def _dispatch_all(self) -> int:
        return self.dispatch(0) if self.delivery == n.Delivery.APPLICATION else 0

    def _dispatch_quietly(self) -> None:  # loop.add_reader callback
        try:
            self._dispatch_all()
        except SpeechClientError:
            pass

    def _wait_event_fd(self, seconds: float) -> None:
        """Waits (at most 0.1 s at a time, so close() is not held up) for the event fd. The client
        counts as busy meanwhile, so the descriptor cannot be closed under the select."""
        try:
            handle = self._enter()
        except InvalidStateError:
            return
        try:
            fd = n.spc_client_event_fd(handle) if n.spc_client_event_fd is not None else -1
            if fd >= 0:
                select.select([fd], [], [], min(seconds, 0.1))
        finally:
            self._leave()

    def _watch_event_fd(self, loop: asyncio.AbstractEventLoop) -> _Reader:
        """Dispatches from `loop` whenever the event fd is readable. A loop has one reader per fd,
        so iterators on the same loop share it: the last one to leave removes it."""
        fd = self.event_fd
        reader = (loop, fd, threading.get_ident())
        with self._cond:
            shared = any(r[0] is loop and r[1] == fd for r in self._readers)
            self._readers.append(reader)
        if not shared:
            try:
                loop.add_reader(fd, self._dispatch_quietly)
            except BaseException:
                with self._cond:
                    self._readers.remove(reader)
                raise
        return reader

    def _unwatch_event_fd(self, reader: _Reader) -> None:
        loop, fd, thread = reader
        with self._cond:
            if reader not in self._readers:  # close() removed every reader already
                return
            self._readers.remove(reader)
            if any(r[0] is loop and r[1] == fd for r in self._readers):
                return
        try:
            if loop.is_closed():
                return
            if thread == threading.get_ident():
                loop.remove_reader(fd)
            else:  # a Stream collected on another thread
                loop.call_soon_threadsafe(loop.remove_reader, fd)
        except Exception:
            pass

    # -- updates as iterators -----------------------------------------------------------------

    def updates(self, timeout: Optional[float] = None) -> Iterator[Update]:
        """Yields Segment, StartEvent, StopEvent, ErrorEvent, StateEvent, ListenEvent and
        LevelEvent updates in the order they happened, until the client is idle after at least
        one StopEvent (or closed); hands-free, until the client is idle after the listening that
        start() began, every context of it included:

            client.start()
            for update in client.updates():   # ends after the context's stop
                ...

        Updates that arrived before the call are yielded first. On an idle client it waits for a
        start (from another thread or a callback) and that context's stop: it never ends before a
        StopEvent unless the client is closed. `timeout` bounds the wait for each next update
        (SpeechTimeoutError). Re-raises an exception a callback raised. Use one
        consumer at a time (updates() or aupdates())."""
        seen_stop = False
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._raise_callback_error()
            update = self._pop()
            if update is not None:
                seen_stop = seen_stop or isinstance(update, StopEvent)
                yield update
                deadline = None if timeout is None else time.monotonic() + timeout
                continue
            if self._handle is None:
                return
            if self._may_end(seen_stop):
                seen_stop = True  # a hands-free listening ended: that counts as its stop
                if not self._queue:
                    self._raise_callback_error()
                    return
                continue
            wait: float = (_IDLE_POLL_S if seen_stop else
                           _WAIT_SLICE_S if self._listening_unseen() else _WAIT_SLICE_S * 4)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SpeechTimeoutError(n.Status.TIMEOUT, f"updates(): no update within {timeout} s")
                wait = min(wait, left)
            if self.delivery == n.Delivery.APPLICATION:
                self._wait_event_fd(wait)
                try:
                    self._dispatch_all()
                except InvalidStateError:
                    if self._handle is not None and not self._closing:
                        raise
            else:
                with self._cond:
                    if not self._queue and self._handle is not None and self._callback_error is None:
                        self._cond.wait(wait)

    async def aupdates(self, timeout: Optional[float] = None) -> AsyncIterator[Update]:
        """updates() for asyncio: the same updates, ending the same way, without blocking the
        event loop. With thread delivery the callback thread hands each update to the loop
        (call_soon_threadsafe); with delivery="application" the loop watches the event fd and
        runs the callbacks itself. It starts nothing; stream() starts a context and ends with
        its stop event."""
        loop = asyncio.get_running_loop()
        q: "asyncio.Queue[_QueueItem]" = asyncio.Queue()
        sink = (loop, q, threading.get_ident())
        with self._cond:
            while self._queue:  # updates that arrived before come first
                q.put_nowait(self._queue.popleft())
            self._async_sinks.append(sink)
        reader = None
        if self.delivery == n.Delivery.APPLICATION and self._handle is not None:
            reader = self._watch_event_fd(loop)
        seen_stop = False
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                self._raise_callback_error()
                try:
                    item: _QueueItem = q.get_nowait()
                except asyncio.QueueEmpty:
                    item = None
                if item is None:
                    if self._handle is None:
                        return
                    if self._may_end(seen_stop):
                        seen_stop = True  # a hands-free listening ended: that counts as its stop
                        # Updates the callback thread handed over before it returned may still
                        # wait in the loop's ready queue: let them land first.
                        await asyncio.sleep(0)
                        if q.empty():
                            self._raise_callback_error()
                            return
                        continue
                    # Hands-free listening can end with no update to wake this wait: look again.
                    wait: Optional[float] = (_IDLE_POLL_S if seen_stop else
                                             _WAIT_SLICE_S if self._listening_unseen() else None)
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise SpeechTimeoutError(n.Status.TIMEOUT, f"aupdates(): no update within {timeout} s")
                        wait = left if wait is None else min(wait, left)
                    try:
                        item = await (q.get() if wait is None else asyncio.wait_for(q.get(), wait))
                    except asyncio.TimeoutError:
                        continue
                if item is _WAKE:
                    continue
                seen_stop = seen_stop or isinstance(item, StopEvent)
                yield item  # type: ignore[misc]
                deadline = None if timeout is None else time.monotonic() + timeout
        finally:
            if reader is not None:
                self._unwatch_event_fd(reader)
            with self._cond:
                if sink in self._async_sinks:
                    self._async_sinks.remove(sink)
                # What arrived for this iterator but was not consumed goes back to the shared queue.
                leftovers: List[Update] = []
                while not q.empty():
                    x = q.get_nowait()
                    if x is not _WAKE:
                        leftovers.append(x)  # type: ignore[arg-type]
                self._queue.extendleft(reversed(leftovers))

    def stream(self, pcm: Optional[Union[_Buffer, Iterable[_Buffer], AsyncIterable[_Buffer]]] = None, *,
               timeout: Optional[float] = None) -> "Stream":
        """asyncio: starts a context and yields its updates (Segment, StartEvent, ErrorEvent,
        StateEvent, and last its StopEvent), then ends. Needs delivery="application": the event
        loop watches the client's event fd (loop.add_reader) and runs the callbacks itself, with
        no other thread entering Python.

            client = Client(url, app_id="demo", audio=WavFile("speech.wav"), delivery="application")
            async for update in client.stream():
                if isinstance(update, Segment) and update.final:
                    print(update.transcript)

        The context starts at the first iteration (start()). A WavFile context stops by itself at
        the end of the file; a Microphone one when you call stop() (for example from the loop
        body: keep iterating until the StopEvent). For a PushAudio client, `pcm` is the audio to
        push: one buffer, an iterable or an async iterable of buffers (what push() takes); a
        task on the same loop pushes them as they come, then calls push_end(). Without `pcm` you
        push() and push_end() (or stop()) yourself, from the loop body or another task.

        Leaving early (break, an exception, cancellation, `timeout` passing) removes the reader at
        once, stops the context (stop()) and lets the client start again right away: the rest of
        that context never reaches a later stream(); it goes to the queue that updates() and
        aupdates() read, as do updates that arrived after the stop event. The cleanup runs when
        the iterator is dropped (at once in CPython, as after `break`); `async with
        client.stream() as updates:` or aclose() make it explicit.

        Hands-free (activation "voice" or "wakeword"), the iteration is the whole listening: every
        context it opened, with the ListenEvents, until the client is idle again (the end of the
        file or of `pcm`, or stop()). Leaving it early stops the listening; its remaining updates
        go to the shared queue, and the next stream() first waits for that listening to end.

        `timeout` bounds the wait for each next update (SpeechTimeoutError). An exception a
        callback raised, or one from iterating `pcm`, is raised here. After close() the iterator
        ends (free abandons the context: no StopEvent). One stream() at a time per client.

        InvalidStateError with thread delivery, while another stream() of this client runs, or
        from start(); InvalidArgumentError for `pcm` given to a client whose audio is not
        PushAudio."""
        if self.delivery != n.Delivery.APPLICATION:
            raise InvalidStateError(n.Status.INVALID_STATE,
                                    'stream(): needs Client(..., delivery="application") (the event loop runs the '
                                    'callbacks); with thread delivery use start() and aupdates()')
        if pcm is not None:
            if not isinstance(self.audio, PushAudio):
                raise InvalidArgumentError(n.Status.INVALID_ARGUMENT,
                                           f"stream(pcm=...): the client's audio is {type(self.audio).__name__}, "
                                           f"not PushAudio")
            try:
                memoryview(pcm).release()
                pcm = (pcm,)  # one buffer
            except TypeError:
                if not hasattr(pcm, "__aiter__") and not hasattr(pcm, "__iter__"):
                    raise InvalidArgumentError(n.Status.INVALID_ARGUMENT,
                                               f"stream(pcm=...): a buffer, an iterable or an async iterable of "
                                               f"buffers, not {type(pcm).__name__}") from None
        self._enter()  # closed: InvalidStateError now rather than at the first iteration
        self._leave()
        return Stream(self, pcm, timeout)

    def _pop(self) -> Optional[Update]:
        with self._cond:
            return self._queue.popleft() if self._queue else None

    def _idle_now(self) -> bool:
        """Idle, no start queued, and every callback so far has run (its update is queued).
        While another thread closes the client: not yet (close() delivers what is pending, then
        the iterators end on the closed handle)."""
        if self._handle is None:
            return True
        try:
            if self.delivery == n.Delivery.APPLICATION:
                return self._dispatch_all() == 0 and self._wait_idle_once(0) and self._dispatch_all() == 0
            return self._wait_idle_once(0)
        except InvalidStateError:
            if self._handle is None:
                return True
            if self._closing:
                return False
            raise

    def _may_end(self, seen_stop: bool) -> bool:
        """Whether an iterator may end now: idle after a StopEvent it yielded, or idle after a
        hands-free start() that no iterator has seen end yet (listening may end without any
        context, so without a StopEvent). Ending marks those starts seen, so the next iterator
        waits for a new start."""
        with self._cond:
            started = self._listens_started
        if not seen_stop and started == self._listens_seen:
            return False
        if not self._idle_now():
            return False
        with self._cond:
            self._listens_seen = max(self._listens_seen, started)
        return True

    def _listening_unseen(self) -> bool:
        return self._listens_started != self._listens_seen

    # -- from the callback thread -------------------------------------------------------------

    def _remember(self, e: BaseException) -> None:
        with self._cond:
            if self._callback_error is None:
                self._callback_error = e
            self._cond.notify_all()
            sinks = self._sinks()
        for sink in sinks:
            self._put_async(sink, _WAKE)

    def _raise_callback_error(self) -> None:
        if self._callback_error is None:
            return
        with self._cond:
            e, self._callback_error = self._callback_error, None
        if e is not None:
            raise e

    def _emit(self, update: Update, kind: str) -> None:
        user = self._callbacks.get(kind)
        if user is not None:
            try:
                user(update)
            except BaseException as e:
                self._remember(e)
        with self._cond:
            sinks = list(self._async_sinks)
            if self._abandoned:
                if isinstance(update, StopEvent):
                    self._abandoned -= 1
            elif self._stream_sink is not None and not self._abandoned_listen:
                sinks.append(self._stream_sink)
            if not sinks:
                self._queue.append(update)
                self._cond.notify_all()
                return
        for sink in sinks:
            self._put_async(sink, update)

    def _sinks(self) -> List[_Sink]:
        """Every async iterator's sink (under self._cond)."""
        return self._async_sinks + ([self._stream_sink] if self._stream_sink is not None else [])

    def _put_async(self, sink: "_Sink", item: _QueueItem) -> None:
        loop, q, thread = sink
        if thread == threading.get_ident():
            self._deliver_async(sink, item)  # inside dispatch() on the loop's own thread
            return
        try:
            loop.call_soon_threadsafe(self._deliver_async, sink, item)
        except RuntimeError:  # the loop is closed: keep the update for updates()
            self._deliver_async(sink, item)

    def _deliver_async(self, sink: "_Sink", item: _QueueItem) -> None:
        """On the loop's thread: into the iterator's queue, or, when that iterator has ended
        meanwhile, back into the shared queue so that no update is lost."""
        with self._cond:
            if sink not in self._async_sinks and sink is not self._stream_sink:
                if item is not _WAKE:
                    self._queue.append(item)  # type: ignore[arg-type]
                    self._cond.notify_all()
                return
        sink[1].put_nowait(item)

    def _log(self, level: int, message: str) -> None:
        user = self._callbacks.get("log")
        if user is not None:
            try:
                lvl: Any = n.LogLevel(level)
            except ValueError:
                lvl = level
            user(lvl, message)


class _Inbox:
    """A stream's updates: a deque and a future to wake the waiting iterator. A wait that times
    out or is cancelled leaves every item in place (asyncio.wait_for on Queue.get may not)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.items: Deque[_QueueItem] = collections.deque()
        self._loop = loop
        self._waiter: Optional["asyncio.Future[None]"] = None

    def put_nowait(self, item: _QueueItem) -> None:  # on the loop's thread
        self.items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self, timeout: Optional[float]) -> None:
        if self.items:
            return
        self._waiter = self._loop.create_future()
        try:
            await asyncio.wait({self._waiter}, timeout=timeout)
        finally:
            self._waiter = None


async def _feed(client: "Client", pcm: Union[Iterable[_Buffer], AsyncIterable[_Buffer]]) -> None:
    """A stream()'s pcm into the client, then push_end(). Module-level, holding no Stream, so a
    dropped Stream is not kept alive by its own task."""
    if hasattr(pcm, "__aiter__"):
        async for chunk in pcm:  # type: ignore[union-attr]
            client.push(chunk)
    else:
        for chunk in pcm:  # type: ignore[union-attr]
            client.push(chunk)
            await asyncio.sleep(0)  # the loop dispatches between chunks
    try:
        client.push_end()
    except InvalidStateError:
        pass  # the context ended first (its error and stop events say why) or the client closed


class Stream:
    """The async iterator that Client.stream() returns: one context's updates, ending after its
    StopEvent. Also an async context manager; aclose() ends it early. See Client.stream()."""

    def __init__(self, client: Client, pcm: Optional[Union[Iterable[_Buffer], AsyncIterable[_Buffer]]],
                 timeout: Optional[float]):
        self._client = client
        self._pcm = pcm
        self._timeout = timeout
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread = 0
        self._inbox: Optional[_Inbox] = None
        self._sink: Optional[_Sink] = None
        self._reader: Optional[_Reader] = None
        self._feeder: Optional["asyncio.Task[None]"] = None
        self._begun = False
        self._started = False  # start() succeeded: a StopEvent is owed
        self._stopped = False  # that StopEvent has been received (hands-free: the listening ended)
        self._done = False
        self._hands_free = client.activation != n.Activation.MANUAL

    def __repr__(self) -> str:
        what = "done" if self._done else "running" if self._begun else "not started"
        return f"<speechclient.Stream {what} on {self._client!r}>"

    def __aiter__(self) -> "Stream":
        return self

    async def __aenter__(self) -> "Stream":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self._finish()

    async def aclose(self) -> None:
        """Ends the stream now (as leaving the loop early does); idempotent."""
        self._finish()

    async def __anext__(self) -> Update:
        if self._done:
            raise StopAsyncIteration
        try:
            if not self._begun:
                self._begun = True
                await self._wait_for_abandoned_listening()
                self._begin()
            return await self._next()
        except BaseException:  # StopAsyncIteration, errors, cancellation: clean up at once
            self._finish()
            raise

    async def _wait_for_abandoned_listening(self) -> None:
        """A hands-free stream() left early has no StopEvent to mark the end of its listening:
        wait until the client is idle (its updates going to the shared queue meanwhile), so
        none of them reaches this stream."""
        c = self._client
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while c._abandoned_listen and c._handle is not None:
            if c._idle_now():
                with c._cond:
                    c._abandoned_listen = False
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise SpeechTimeoutError(n.Status.TIMEOUT, f"stream(): the listening left before did not end "
                                                           f"within {self._timeout} s")
            await asyncio.sleep(_IDLE_POLL_S)

    def _begin(self) -> None:
        c = self._client
        loop = asyncio.get_running_loop()
        if c._stream_sink is not None:
            raise InvalidStateError(n.Status.INVALID_STATE, "stream(): another stream() of this client is running "
                                                            "(leave its loop or aclose() it first)")
        # What is pending from before belongs to earlier contexts: dispatched now, it goes to the
        # shared queue (or to a context left early), not to this stream.
        c._dispatch_all()
        self._loop, self._thread = loop, threading.get_ident()
        self._inbox = _Inbox(loop)
        sink = (loop, self._inbox, self._thread)
        with c._cond:
            if c._stream_sink is not None:
                raise InvalidStateError(n.Status.INVALID_STATE, "stream(): another stream() of this client is running")
            c._stream_sink = self._sink = sink
        self._reader = c._watch_event_fd(loop)
        c.start()
        self._started = True
        if self._pcm is not None:
            inbox = self._inbox
            self._feeder = loop.create_task(_feed(c, self._pcm))
            self._feeder.add_done_callback(lambda _task: inbox.put_nowait(_WAKE))

    async def _next(self) -> Update:
        c, inbox = self._client, self._inbox
        assert inbox is not None
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            c._raise_callback_error()
            if inbox.items:
                item = inbox.items.popleft()
                if item is _WAKE:
                    continue
                if isinstance(item, StopEvent) and not self._hands_free:
                    self._stopped = True
                    self._finish()  # updates after the stop go to the shared queue
                return item  # type: ignore[return-value]
            if c._handle is None:
                raise StopAsyncIteration
            if self._hands_free and c._may_end(True):
                if inbox.items:  # dispatched while looking: yield them first
                    continue
                self._stopped = True
                raise StopAsyncIteration
            feeder = self._feeder
            if feeder is not None and feeder.done() and not feeder.cancelled() and feeder.exception() is not None:
                raise feeder.exception()  # type: ignore[misc]
            left = None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SpeechTimeoutError(n.Status.TIMEOUT, f"stream(): no update within {self._timeout} s")
            if self._hands_free:  # the listening can end with no update to wake the wait
                left = _WAIT_SLICE_S if left is None else min(left, _WAIT_SLICE_S)
            await inbox.wait(left)

    def _finish(self) -> None:
        """Idempotent, synchronous (it runs from __del__ too), from any thread."""
        if self._done:
            return
        self._done = True
        c, loop = self._client, self._loop
        on_loop = self._thread == threading.get_ident()
        feeder = self._feeder
        if feeder is not None:
            if feeder.done():
                if not feeder.cancelled():
                    feeder.exception()  # retrieved: asyncio does not log it as lost
            elif on_loop:
                feeder.cancel()
            elif loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(feeder.cancel)
        if self._reader is not None:
            c._unwatch_event_fd(self._reader)
        if self._sink is None:
            return
        abandon = False
        with c._cond:
            if c._stream_sink is self._sink:
                c._stream_sink = None
            inbox = self._inbox
            leftovers = [x for x in inbox.items if x is not _WAKE] if inbox is not None else []
            if inbox is not None:
                inbox.items.clear()
            if leftovers:  # not lost: for updates()/aupdates()
                c._queue.extend(leftovers)  # type: ignore[arg-type]
                c._cond.notify_all()
            stopped = self._stopped or (not self._hands_free and any(isinstance(x, StopEvent) for x in leftovers))
            if self._started and not stopped and c._handle is not None and not c._closing:
                abandon = True
                if self._hands_free:
                    c._abandoned_listen = True
                else:
                    c._abandoned += 1
                handle = c._handle
                c._busy += 1  # as _enter(), without re-raising a callback's exception here
        if abandon:
            try:
                n.spc_client_stop(handle)  # INVALID_STATE when it is stopping already: fine
            finally:
                c._leave()

    def __del__(self) -> None:
        try:
            if self._done:
                return
            # Collected while this thread holds the client's lock (a cycle collected mid-call):
            # finish from the loop instead of deadlocking.
            if not self._client._cond.acquire(blocking=False):
                if self._loop is not None and not self._loop.is_closed():
                    self._loop.call_soon_threadsafe(self._finish)
                return
            self._client._cond.release()
            self._finish()
        except BaseException:
            pass


def _state_name(value: int) -> str:
    try:
        return n.State(value).name
    except ValueError:
        return str(value)


