"""The public synchronous API: Client, which owns one spc_client.

This layer is what an application calls; it sits on the handle layer (_handle.py: the pointer,
the callbacks from C, freeing) and has its asyncio side (aupdates, stream, Stream) in _aio.py.

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

import collections
import ctypes
import os
import select
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, Mapping, Optional, Tuple, Union

from . import _native as n
from ._aio import Stream, _AsyncMixin
from ._handle import (MAX_BUFFERED_UPDATES, _IDLE_POLL_S, _VAD_RANGES, _WAIT_SLICE_S, _activation, _next_wait, _Buffer, _c_path, _c_string,
                      _check_option, _Handle, _option_error, _status_text, _u32, _vad_settings, copy_segment)
from .errors import InvalidArgumentError, InvalidStateError, SpeechClientError, error_for
from .types import (AudioSource, AudioStream, ErrorEvent, LevelEvent, ListenEvent, Microphone, PushAudio, Segment,
                    StartEvent, StateEvent, StopEvent, Update, WavFile)

__all__ = ["Client", "Stream", "MAX_BUFFERED_UPDATES", "copy_segment"]


# ---------------------------------------------------------------------------------------------

class Client(_AsyncMixin, _Handle):
    """A streaming recognition client: an audio source, a connection to a speech server, and the
    updates that report what was heard. `url` names the server and its protocol: grpc://host:port
    or grpc+tls://host:port (the Speechly SLU protocol; app_id required), wyoming://host:port or
    wyoming+unix:///path (a Wyoming speech-to-text service), riva://host:port or rivas://host:port
    (NVIDIA Riva); the same updates come from each.

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
    "thread" (the client's own callback thread), "shared" (libspeechclient 0.10: a few callback
    threads every such client shares, each client's callbacks still in order, one at a time) or
    "application" (see the module documentation).
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
        super().__init__()  # _AsyncMixin's state, then _Handle's
        self._queue: Deque[Update] = collections.deque(maxlen=MAX_BUFFERED_UPDATES)
        self._callbacks: Dict[str, Optional[Callable[..., Any]]] = {
            "segment": on_segment, "error": on_error, "start": on_start, "stop": on_stop, "state": on_state,
            "log": on_log, "listen": on_listen, "level": on_level}
        # Hands-free starts made, and how many of them an iterator has seen end: listening can end
        # without any context (so without a StopEvent) and the iterators must still end.
        self._listens_started = 0
        self._listens_seen = 0
        # A push may wait for room (push_wait_ms): a stream()'s feeder pushes off the event loop.
        self._push_waits = bool(push_wait_ms)

        if isinstance(delivery, str):
            if delivery not in ("thread", "application", "shared"):
                raise _option_error("delivery", f"delivery={delivery!r}: must be 'thread', 'shared' or 'application'")
            delivery = n.Delivery[delivery.upper()]
        try:
            self.delivery: n.Delivery = n.Delivery(delivery)
        except ValueError:
            raise _option_error("delivery", f"delivery={delivery!r}: not a Delivery") from None
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
        self._push_epoch = 0  # counts the changes of _push_rest: a refused push restores it only if none came since
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

            self._open(opts, log=on_log is not None, levels=levels)
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

    # -- calls --------------------------------------------------------------------------------

    def start(self) -> None:
        """Requests a new audio context (see spc_client_start): the start event follows, or an
        error event and a stop event. InvalidStateError unless IDLE (or STOPPING: then queued).
        With activation "voice" or "wakeword" it begins listening instead (contexts open as the
        user speaks) until stop() or the end of the audio."""
        self._drop_partial_frame()
        self._call("start()", n.spc_client_start)
        if self.activation != n.Activation.MANUAL:
            with self._cond:
                self._listens_started += 1

    def stop(self) -> None:
        """Requests the end of the current context; the stop event follows its last result.
        While listening hands-free: ends the activation in progress and the listening. A partial
        frame kept from the last push() is dropped (it belongs to no whole sample)."""
        self._drop_partial_frame()
        self._call("stop()", n.spc_client_stop)

    def suspend(self) -> None:
        """Closes the microphone and the connections, keeping the login; an open context is
        stopped first, its results still arriving (a partial pushed frame is dropped, as by stop())."""
        self._drop_partial_frame()
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
        format 'h'. A push need not hold whole frames (an odd byte, one sample of a stereo pair,
        as a pipe hands them out): the part of a frame left over waits for the next push, and is
        dropped by stop(), push_end(), suspend() and start(). bytes and writable contiguous buffers
        reach the library without a copy; others are copied once (the library copies what it is
        given before returning). Samples pushed outside a context are dropped; after a start
        queued behind a pending stop they are held for its context. With push_wait_ms it may wait
        that long for room in the replay buffer (SpeechTimeoutError: none of it was taken, push
        it again); a Ctrl-C lands once it returns, and close() from another thread ends the wait
        (with a stop). InvalidStateError for a client whose audio is not PushAudio."""
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
        with self._push_lock:  # held for the bytes carried over only, never across the library's wait
            carried = self._push_rest
            if carried or nbytes % frame_bytes:
                # Part of a frame (an odd byte, a sample of a stereo pair, as a pipe or a socket
                # hands them out) waits for the next push, instead of failing this one.
                data = carried + mv.tobytes()
                mv.release()
                whole = len(data) - len(data) % frame_bytes
                self._push_rest = data[whole:]
                self._push_epoch += 1
                epoch = self._push_epoch
        if carried or nbytes % frame_bytes:
            status = self._push_status(ctypes.cast(ctypes.c_char_p(data), ctypes.POINTER(ctypes.c_int16))
                                       if whole else None, whole // frame_bytes)
            if status != n.Status.OK:
                # Nothing of this call was taken: the carried bytes are as before it (unless a
                # stop or another push changed them meanwhile). Only on the library's refusal: a
                # KeyboardInterrupt landing after a push that was taken restored bytes already sent.
                with self._push_lock:
                    if self._push_epoch == epoch:  # not changed since (a stop, another push)
                        self._push_rest = carried
            self._raise_push(status)
            return
        self._push_view(samples, mv, nbytes // 2, nbytes // frame_bytes)

    def _drop_partial_frame(self) -> None:
        """A context ends or begins: part of a frame carried from the last push() belonged to
        the audio before it. Carried into the next context, it shifted every sample by that many
        bytes (noise, or the channels swapped)."""
        with self._push_lock:
            self._push_rest = b""
            self._push_epoch += 1

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
        handle = self._enter(pushing=True)
        try:
            return n.spc_client_push_audio(handle, data, frames)
        finally:
            self._leave(pushing=True)

    def push_end(self) -> None:
        """Marks the end of the pushed audio: the context stops by itself, as a WAV file's does.
        For a start queued behind a pending stop, that start's context ends once it opens, with
        what was pushed for it (library 0.11). A partial frame kept from the last push() is
        dropped."""
        self._drop_partial_frame()
        self._call("push_end()", n.spc_client_push_end)

    def wait_idle(self, timeout: Optional[float] = None) -> bool:
        """Waits until the client is IDLE or SUSPENDED with no start queued and every callback for
        the events so far has returned: True; or until `timeout` seconds passed: False. Then
        re-raises an exception a callback raised. InvalidStateError from inside a callback. With
        delivery="application" it runs the pending callbacks itself while it waits."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        app = self.delivery == n.Delivery.APPLICATION
        while True:
            # In slices: Ctrl-C (KeyboardInterrupt) is handled in Python, between two library waits.
            left = _WAIT_SLICE_S if deadline is None else min(_WAIT_SLICE_S, deadline - time.monotonic())
            ran = 0
            # The library calls inside leave a callback's exception for the end of the wait: raised
            # at a slice, the client was not idle yet, and a close() after it abandoned the context.
            if app:
                # Idle once the library's work is, with every event queued before that delivered:
                # the callbacks run here first, then the events that came with its end (the idle
                # one). A callback run in this slice no longer made it "not idle": an event queued
                # after the work ended (a late log line) made wait_idle(0) False on an idle client.
                ran = self._dispatch_all(quiet=True)
                idle = self._wait_idle_once(0, quiet=True)
                if idle:
                    ran += self._dispatch_all(quiet=True)
            else:
                idle = self._wait_idle_once(max(0, int(left * 1000)), quiet=True)
            if idle:
                self._raise_callback_error()
                return True
            if deadline is not None and time.monotonic() >= deadline:
                self._raise_callback_error()
                return False
            # What just ran may have been the last event (the idle one): look again at once. An
            # event ends the wait on the fd early (the idle event too, 0.11; before, it is polled).
            if app and ran == 0:
                self._wait_event_fd(max(0.0, left if self._idle_announced else min(left, _IDLE_POLL_S)), quiet=True)

    def _wait_idle_once(self, ms: int, quiet: bool = False) -> bool:
        handle = self._enter(raise_pending=not quiet)
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
        return self._dispatch(max_events)

    def _dispatch(self, max_events: int, quiet: bool = False) -> int:
        ran = ctypes.c_uint32(0)
        self._call("dispatch()", n.spc_client_dispatch, _u32("max_events", max_events), ctypes.byref(ran),
                   raise_pending=not quiet)
        return ran.value

    def _dispatch_all(self, quiet: bool = False) -> int:
        return self._dispatch(0, quiet) if self.delivery == n.Delivery.APPLICATION else 0

    def _wait_event_fd(self, seconds: float, quiet: bool = False) -> None:
        """Waits (at most 0.1 s at a time, so close() is not held up) for the event fd. The client
        counts as busy meanwhile, so the descriptor cannot be closed under the poll."""
        try:
            handle = self._enter(raise_pending=not quiet)
        except InvalidStateError:
            return
        try:
            fd = n.spc_client_event_fd(handle) if n.spc_client_event_fd is not None else -1
            if fd >= 0:
                # poll, not select: select refuses a descriptor numbered 1024 or more, which a
                # process with many clients (what application delivery is for) soon has.
                waiter = select.poll()
                waiter.register(fd, select.POLLIN)
                waiter.poll(int(min(seconds, 0.1) * 1000))
        finally:
            self._leave()

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
        consumer at a time (updates() or aupdates()): it takes over from an aupdates() left but
        not yet closed, whose unread updates come first. Not from inside one of the client's
        callbacks (InvalidStateError): the updates it waits for come through that thread."""
        if self._in_own_callback():
            # It waited for ever: the callback thread it blocked is the one that delivers them,
            # and close() from another thread then waited for that callback.
            raise InvalidStateError(n.Status.INVALID_STATE,
                                    "updates() from inside one of the client's own callbacks: its updates come through "
                                    "this thread (use the callbacks themselves, or iterate on another thread)")
        with self._cond:
            taken_over = self._take_over_async_sinks_locked()  # an aupdates() left, not finalised
        for old in taken_over:
            self._wake_sink(old)
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
            with self._cond:
                idles = self._idle_count  # an idle event after this wakes the wait below
            if self._may_end(seen_stop):
                seen_stop = True  # a hands-free listening ended: that counts as its stop
                if not self._queue:
                    self._raise_callback_error()
                    return
                continue
            # The end of the work wakes this wait (the idle event, 0.11); an older library's is
            # looked for again after a short wait. The slices let Ctrl-C through.
            wait = _next_wait(_WAIT_SLICE_S * 4 if self._idle_announced else
                              _IDLE_POLL_S if seen_stop else
                              _WAIT_SLICE_S if self._listening_unseen() else _WAIT_SLICE_S * 4,
                              deadline, "updates()", timeout)
            if self.delivery == n.Delivery.APPLICATION:
                # Looking for the end may have run the last events (the idle one): no wait then.
                with self._cond:
                    more = bool(self._queue) or self._idle_count != idles
                if not more:
                    self._wait_event_fd(wait)
                try:
                    self._dispatch_all()
                except InvalidStateError:
                    if self._handle is not None and not self._closing:
                        raise
            else:
                with self._cond:
                    if (not self._queue and self._handle is not None and self._callback_error is None
                            and self._idle_count == idles):
                        self._cond.wait(wait)

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
            # Into the inboxes under the same lock that chose them: an iterator that ends or
            # begins meanwhile then sees it in its inbox or in the shared queue, in order.
            for sink in sinks:
                items = sink[1].items
                if len(items) == items.maxlen:  # the oldest goes: so does its mark
                    sink[1].also_delivered.discard(id(items[0]))
                items.append(update)
            if len(sinks) > 1 and sinks[-1] is self._stream_sink:  # an aupdates() has it too
                sinks[-1][1].also_delivered.add(id(update))
        for sink in sinks:
            self._wake_sink(sink)

    def _on_idle(self) -> None:
        """The idle callback (0.11): the client's work ended. Not an update: it wakes every wait
        for the end (iterators, streams), which then look at the client."""
        with self._cond:
            self._idle_count += 1
            self._cond.notify_all()
        self._wake_async()

    def _log(self, level: int, message: str) -> None:
        user = self._callbacks.get("log")
        if user is not None:
            try:
                lvl: Any = n.LogLevel(level)
            except ValueError:
                lvl = level
            user(lvl, message)
