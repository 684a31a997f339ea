"""The handle layer: one spc_client pointer, owned safely from Python.

It exists so that the C handle's rules live in one place, under the API that client.py builds on
them: the callbacks' ctypes thunks outlive every client (no C thread can call a freed one), an
exception raised in a callback never reaches C, the pointer is never freed under a call or from
its own callback thread, and clients still open at exit are freed before the interpreter
finalizes. The conversions between Python values and C (options in, updates out) are here too.
"""
from __future__ import annotations

import atexit
import ctypes
import itertools
import operator
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import _native as n
from .errors import InvalidArgumentError, InvalidStateError, SpeechTimeoutError, error_for
from .types import Entity, ErrorEvent, Intent, LevelEvent, ListenEvent, Segment, StartEvent, StateEvent, StopEvent, Word

if TYPE_CHECKING:
    from .client import Client

#: Updates kept for updates()/aupdates() while nobody reads them, and in each async iterator's
#: inbox; beyond that the oldest are dropped (a client used only through its callbacks, or an
#: iterator that stopped reading, does not grow without bound).
MAX_BUFFERED_UPDATES = 10_000

# The longest single wait inside the library, so that Ctrl-C and close() from another thread
# are noticed.
_WAIT_SLICE_S = 0.25
# How often an iterator that has seen a stop checks whether the client became idle, with a
# library older than 0.11 (it signals events, not the client going idle). From 0.11 the idle
# event wakes the iterators instead.
_IDLE_POLL_S = 0.02


def _next_wait(slice_s: Optional[float], deadline: Optional[float], what: str, timeout: Optional[float]) -> Optional[float]:
    """How long an iterator's next wait for an update may be: `slice_s` (None: unbounded), cut
    to `deadline`; past the deadline, SpeechTimeoutError naming `what`. The one rule of
    updates(), aupdates() and stream() for their `timeout`."""
    if deadline is None:
        return slice_s
    left = deadline - time.monotonic()
    if left <= 0:
        raise SpeechTimeoutError(n.Status.TIMEOUT, f"{what}: no update within {timeout} s")
    return left if slice_s is None else min(slice_s, left)


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
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: no UTF-8 for it
        raise _option_error(option, f"{option}={value!r}: not valid Unicode text "
                                    f"({e.reason} at character {e.start})") from None


def _c_path(option: str, value: Any) -> Optional[bytes]:
    if value is None:
        return None
    try:
        path = os.fsencode(value)
    except TypeError:
        raise _option_error(option, f"{option}={value!r}: must be a path, not {type(value).__name__}") from None
    except UnicodeEncodeError as e:  # a lone surrogate the file system encoding cannot carry
        raise _option_error(option, f"{option}={value!r}: not a valid path ({e.reason} at character {e.start})") from None
    if b"\0" in path:
        raise _option_error(option, f"{option}={value!r}: contains a NUL character")
    try:
        path.decode("utf-8")
    except UnicodeDecodeError as e:
        # The library takes UTF-8 names only (it refuses others rather than open a name never given).
        also = (", or open it and pass AudioStream(f.fileno(), 0, 0) (a WAV stream)"
                if option == "audio.path" else "")
        raise _option_error(option, f"{option}={value!r}: the name is not UTF-8 (byte 0x{path[e.start]:02x} "
                                    f"at {e.start}); the library takes UTF-8 paths: rename it{also}") from None
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


def _state_name(value: int) -> str:
    try:
        return n.State(value).name
    except ValueError:
        return str(value)


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


# ---------------------------------------------------------------------------------------------
# Trampolines: one set for the process, created once and never freed, so that no C thread can
# ever call a freed ctypes thunk. user_data is an integer key; the client behind it is held
# weakly, and a callback for a client that is gone is ignored.

_clients: Dict[int, "weakref.ref[Client]"] = {}  # Client: _Handle with _emit() and _log()
# Reentrant: the cyclic garbage collector can run while a thread holds it (an allocation inside),
# and a client it collects closes itself, which takes it again (a plain lock deadlocked there).
_clients_lock = threading.RLock()
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


def _t_idle(_client, key):
    _run_callback(key, lambda c: c._on_idle())


_TRAMPOLINES = (n.SEGMENT_CB(_t_segment), n.ERROR_CB(_t_error), n.START_CB(_t_start), n.STOP_CB(_t_stop),
                n.LOG_CB(_t_log), n.STATE_CB(_t_state), n.LISTEN_CB(_t_listen), n.LEVEL_CB(_t_level),
                n.IDLE_CB(_t_idle))


@atexit.register
def _close_all_at_exit() -> None:
    # Library threads must not call into an interpreter that is finalizing.
    with _clients_lock:
        live = [r() for r in list(_clients.values())]  # copied first: a collection may remove one
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


# ---------------------------------------------------------------------------------------------

class _Handle:
    """One spc_client: the pointer, counted busy while a call uses it, freed once. Client
    (client.py) builds its API on it; the asyncio side (_aio.py) fills in the two hooks below."""

    def __init__(self) -> None:
        # Everything close() and __del__ touch exists before anything can fail.
        self._handle: Optional[Any] = None
        self._key = next(_keys)
        self._cond = threading.Condition(threading.Lock())
        self._busy = 0
        self._pushing = 0  # of the busy calls, pushes (one may wait for room: close() stops it)
        self._closing = False
        self._callback_error: Optional[BaseException] = None
        # The process-wide trampolines, referenced here too: the client relies on them.
        self._trampolines = _TRAMPOLINES
        # The library announces the end of the work (0.11: the idle callback), so waits for it
        # are woken, not polled; and how many idle events came (under _cond).
        self._idle_announced = False
        self._idle_count = 0

    def _open(self, opts: Any, log: bool, levels: bool) -> None:
        """Sets the trampolines as the callbacks of `opts` (the log and level ones only when
        wanted), then creates the client; its callbacks can run before spc_client_new returns."""
        segment_cb, error_cb, start_cb, stop_cb, log_cb, state_cb, listen_cb, level_cb, idle_cb = _TRAMPOLINES
        ud = ctypes.c_void_p(self._key)
        for setter, cb, name in ((n.spc_options_set_segment_cb, segment_cb, "segment"),
                                 (n.spc_options_set_error_cb, error_cb, "error"),
                                 (n.spc_options_set_start_cb, start_cb, "start"),
                                 (n.spc_options_set_stop_cb, stop_cb, "stop"),
                                 (n.spc_options_set_state_cb, state_cb, "state"),
                                 (n.spc_options_set_listen_cb, listen_cb, "listen")):
            if setter is not None:  # the state and listen callbacks need a library that has them
                _check_option(setter(opts, cb, ud), f"{name} callback", name)
        if log:  # log lines cost a trip into Python only when wanted
            _check_option(n.spc_options_set_log_cb(opts, log_cb, ud), "log callback", "log")
        if levels:  # the library measures levels only for a callback
            _check_option(n.spc_options_set_level_cb(opts, level_cb, ud), "level callback", "level")
        if n.spc_options_set_idle_cb is not None:
            _check_option(n.spc_options_set_idle_cb(opts, idle_cb, ud), "idle callback", "idle")
            self._idle_announced = True

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

    # -- hooks for the asyncio side (_aio._AsyncMixin) --------------------------------------------

    def _remove_readers(self) -> None:
        """Before the free: no event loop may watch the event fd any more."""

    def _wake_async(self) -> None:
        """The client closed or a callback raised: async iterators must look at it again."""

    # -- freeing ------------------------------------------------------------------------------

    def __del__(self) -> None:
        try:
            self._close(quiet=True)
        except BaseException:
            pass

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
            stop_at: Optional[float] = None
            stopped = False
            try:
                while self._busy:  # calls from other threads return first
                    if self._pushing and not stopped:
                        now = time.monotonic()
                        stop_at = now + 0.05 if stop_at is None else stop_at
                        if now < stop_at:
                            self._cond.wait(stop_at - now)
                            continue
                        # A push still in the library after 50 ms waits for room (push_wait_ms, up
                        # to an hour): a stop ends that wait, its frames not taken, as free's own
                        # abandoning of the context would have dropped them.
                        stopped = True
                        self._cond.release()
                        try:
                            n.spc_client_stop(handle)
                        finally:
                            self._cond.acquire()
                        continue
                    self._cond.wait()
            except BaseException:
                self._closing = False
                self._cond.notify_all()
                raise
        self._remove_readers()
        try:
            status = n.spc_client_free(handle)
        except BaseException:
            # A KeyboardInterrupt raised as the free returned (Python runs signal handlers between
            # bytecodes, and Ctrl-C during a free that runs pending callbacks lands there): the
            # handle is gone. Left as it was, `_closing` stayed set and the next close() or the
            # interpreter's exit waited for ever.
            self._forget_handle()
            raise
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
        with _clients_lock:
            _clients.pop(self._key, None)
        self._wake_async()

    # -- calls --------------------------------------------------------------------------------

    def _in_own_callback(self) -> bool:
        return self._key in _active_keys()

    def _enter(self, raise_pending: bool = True, pushing: bool = False) -> Any:
        """The handle, counted busy until _leave(), so close() waits for the call to return.
        First re-raises an exception a callback raised, unless `raise_pending` is False (the
        waits inside wait_idle(), which re-raises it once the wait is over)."""
        if raise_pending:
            self._raise_callback_error()
        with self._cond:
            if self._handle is None or (self._closing and not self._in_own_callback()):
                raise InvalidStateError(n.Status.INVALID_STATE, "the client is closed")
            self._busy += 1
            self._pushing += pushing
            return self._handle

    def _leave(self, pushing: bool = False) -> None:
        with self._cond:
            self._busy -= 1
            self._pushing -= pushing
            if self._busy == 0:
                self._cond.notify_all()

    def _call(self, what: str, fn: Callable[..., int], *args: Any, raise_pending: bool = True) -> None:
        handle = self._enter(raise_pending)
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

    # -- exceptions from callbacks ------------------------------------------------------------

    def _remember(self, e: BaseException) -> None:
        """Keeps the first exception a callback raised, for the next call to re-raise."""
        with self._cond:
            if self._callback_error is None:
                self._callback_error = e
            self._cond.notify_all()
        self._wake_async()

    def _raise_callback_error(self) -> None:
        if self._callback_error is None:
            return
        with self._cond:
            e, self._callback_error = self._callback_error, None
        if e is not None:
            raise e
