"""The Pythonic layer: Client owns one spc_client."""
from __future__ import annotations

import array
import asyncio
import ctypes
import os
import queue
import threading
from typing import AsyncIterator, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from . import _native as n
from .errors import InvalidArgumentError, SpeechClientError, error_for
from .types import (AudioSource, Entity, ErrorEvent, Intent, Microphone, PushAudio, Segment, StartEvent,
                    StopEvent, Update, WavFile, Word)

#: Updates kept for updates()/aupdates() before the oldest are dropped (a client nobody reads).
MAX_BUFFERED_UPDATES = 10_000


def _text(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "replace") if b else ""


def copy_segment(s: int) -> Segment:
    words = tuple(
        Word(_text(n.spc_segment_word_text(s, i)), n.spc_segment_word_index(s, i),
             n.spc_segment_word_start_ms(s, i), n.spc_segment_word_end_ms(s, i),
             bool(n.spc_segment_word_is_final(s, i)))
        for i in range(n.spc_segment_word_count(s)))
    entities = tuple(
        Entity(_text(n.spc_segment_entity_type(s, i)), _text(n.spc_segment_entity_value(s, i)),
               n.spc_segment_entity_start(s, i), n.spc_segment_entity_end(s, i),
               bool(n.spc_segment_entity_is_final(s, i)))
        for i in range(n.spc_segment_entity_count(s)))
    intent_text = _text(n.spc_segment_intent(s))
    intent = Intent(intent_text, bool(n.spc_segment_intent_is_final(s))) if intent_text else None
    return Segment(_text(n.spc_segment_context_id(s)), n.spc_segment_id(s), bool(n.spc_segment_is_final(s)),
                   _text(n.spc_segment_transcript(s)), words, intent, entities, _text(n.spc_segment_json(s)))


def _check(status: int, what: str) -> None:
    if status != n.Status.OK:
        raise error_for(status, f"{what}: {_text(n.spc_status_str(status))}")


class Client:
    """A recognition client. Use it as a context manager, or call close().

    Callbacks (on_segment, on_error, on_start, on_stop, on_log) run on the library's callback
    thread, in order. An exception raised by one is not propagated into C: the first is kept
    and re-raised by the next call on the client (or by updates()/aupdates()).
    """

    def __init__(self, url: str, app_id: Optional[str] = None, *, project_id: Optional[str] = None,
                 language: Optional[str] = None, device_id: Optional[str] = None, cache_dir: Optional[str] = None,
                 ca_file: Optional[str] = None, insecure_tls: bool = False, audio: AudioSource = Microphone(),
                 chunk_ms: Optional[int] = None, prepare_on_init: bool = False,
                 context_options: Optional[Dict[str, Union[str, Iterable[str]]]] = None,
                 log_level: n.LogLevel = n.LogLevel.WARNING,
                 reconnect: Optional[Tuple[int, int, int]] = None, replay_buffer_ms: Optional[int] = None,
                 context_limit_ms: Optional[int] = None,
                 on_segment: Optional[Callable[[Segment], None]] = None,
                 on_error: Optional[Callable[[ErrorEvent], None]] = None,
                 on_start: Optional[Callable[[StartEvent], None]] = None,
                 on_stop: Optional[Callable[[StopEvent], None]] = None,
                 on_log: Optional[Callable[[n.LogLevel, str], None]] = None):
        self._handle: Optional[int] = None
        self._callback_error: Optional[BaseException] = None
        self._updates: "queue.Queue[Update]" = queue.Queue()
        self._async_queues: List = []
        self._lock = threading.Lock()
        self._user = {"segment": on_segment, "error": on_error, "start": on_start, "stop": on_stop, "log": on_log}
        self.audio = audio
        opts = n.spc_options_new()
        if not opts:
            raise error_for(n.Status.NO_MEMORY, "spc_options_new failed")
        try:
            def setter(fn, what, *args):
                status = fn(opts, *args)
                if status != n.Status.OK:
                    shown = ", ".join(repr(a.decode() if isinstance(a, bytes) else a) for a in args)
                    raise error_for(status, f"{what} {shown}: {_text(n.spc_status_str(status))}")

            def enc(s: Optional[str]) -> Optional[bytes]:
                return None if s is None else os.fsencode(s) if isinstance(s, os.PathLike) else str(s).encode()

            setter(n.spc_options_set_server_url, "url", enc(url))
            if app_id is not None:
                setter(n.spc_options_set_app_id, "app_id", enc(app_id))
            if project_id is not None:
                setter(n.spc_options_set_project_id, "project_id", enc(project_id))
            if language is not None:
                setter(n.spc_options_set_language, "language", enc(language))
            if device_id is not None:
                setter(n.spc_options_set_device_id, "device_id", enc(device_id))
            if cache_dir is not None:
                setter(n.spc_options_set_cache_dir, "cache_dir", enc(os.fspath(cache_dir)))
            if ca_file is not None:
                setter(n.spc_options_set_ca_file, "ca_file", enc(os.fspath(ca_file)))
            if insecure_tls:
                setter(n.spc_options_set_insecure_tls, "insecure_tls", 1)
            if isinstance(audio, Microphone):
                setter(n.spc_options_set_audio_microphone, "microphone", enc(audio.device))
            elif isinstance(audio, WavFile):
                setter(n.spc_options_set_audio_file, "WAV file", enc(os.fspath(audio.path)))
            elif isinstance(audio, PushAudio):
                setter(n.spc_options_set_audio_push, "push audio (rate, channels)", audio.sample_rate, audio.channels)
            else:
                raise InvalidArgumentError(f"audio must be Microphone, WavFile or PushAudio, not {audio!r}")
            if chunk_ms is not None:
                setter(n.spc_options_set_chunk_ms, "chunk_ms", chunk_ms)
            if prepare_on_init:
                setter(n.spc_options_set_prepare_on_init, "prepare_on_init", 1)
            for key, values in (context_options or {}).items():
                for v in ([values] if isinstance(values, str) else values):
                    setter(n.spc_options_add_context_option, "context option", enc(key), enc(v))
            setter(n.spc_options_set_log_level, "log_level", int(log_level))
            if reconnect is not None:
                setter(n.spc_options_set_reconnect, "reconnect (attempts, initial ms, max ms)", *reconnect)
            if replay_buffer_ms is not None:
                setter(n.spc_options_set_replay_buffer_ms, "replay_buffer_ms", replay_buffer_ms)
            if context_limit_ms is not None:
                setter(n.spc_options_set_context_limit_ms, "context_limit_ms", context_limit_ms)
            # One set of trampolines, kept alive on the client for as long as C may call them.
            self._trampolines = (n.SEGMENT_CB(self._on_segment), n.ERROR_CB(self._on_error),
                                 n.START_CB(self._on_start), n.STOP_CB(self._on_stop), n.LOG_CB(self._on_log))
            n.spc_options_set_segment_cb(opts, self._trampolines[0], None)
            n.spc_options_set_error_cb(opts, self._trampolines[1], None)
            n.spc_options_set_start_cb(opts, self._trampolines[2], None)
            n.spc_options_set_stop_cb(opts, self._trampolines[3], None)
            if on_log is not None:
                n.spc_options_set_log_cb(opts, self._trampolines[4], None)
            handle = n.client_p()
            err = n.error_p()
            status = n.spc_client_new(opts, ctypes.byref(handle), ctypes.byref(err))
            if status != n.Status.OK:
                message = _text(n.spc_error_message(err))
                grpc = n.spc_error_grpc_status(err)
                n.spc_error_free(err)
                raise error_for(status, message, grpc if grpc >= 0 else None)
            self._handle = handle.value
        finally:
            n.spc_options_free(opts)

    # -- lifecycle

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def close(self) -> None:
        """Stops and frees the client; returns after its last callback. Idempotent. From inside
        one of its own callbacks: InvalidStateError."""
        with self._lock:
            handle = self._handle
            if handle is None:
                return
            status = n.spc_client_free(handle)
            if status == n.Status.OK:
                self._handle = None
        _check(status, "close")
        self._wake_async()

    @property
    def closed(self) -> bool:
        return self._handle is None

    def _h(self) -> int:
        err, self._callback_error = self._callback_error, None
        if err is not None:
            raise err
        if self._handle is None:
            raise error_for(n.Status.INVALID_STATE, "the client is closed")
        return self._handle

    # -- requests

    def start(self) -> None:
        _check(n.spc_client_start(self._h()), "start")

    def stop(self) -> None:
        _check(n.spc_client_stop(self._h()), "stop")

    def suspend(self) -> None:
        _check(n.spc_client_suspend(self._h()), "suspend")

    def resume(self) -> None:
        _check(n.spc_client_resume(self._h()), "resume")

    @property
    def state(self) -> n.State:
        out = ctypes.c_int()
        _check(n.spc_client_get_state(self._h(), ctypes.byref(out)), "state")
        return n.State(out.value)

    def push(self, samples) -> None:
        """Pushes interleaved signed 16-bit samples (bytes, bytearray, memoryview, array('h'),
        or a numpy int16 array). Writable buffers are passed without a copy."""
        handle = self._h()
        mv = memoryview(samples)
        if mv.format != "h":
            if mv.nbytes % 2:
                raise InvalidArgumentError(f"push: {mv.nbytes} bytes is not a whole number of 16-bit samples")
            mv = mv.cast("B").cast("h")
        count = mv.nbytes // 2
        if count == 0:
            _check(n.spc_client_push_audio(handle, None, 0), "push")
            return
        if mv.readonly:
            buf = (ctypes.c_int16 * count).from_buffer_copy(mv)
        else:
            buf = (ctypes.c_int16 * count).from_buffer(mv)
        channels = self.audio.channels if isinstance(self.audio, PushAudio) else 1
        frames = count // channels
        _check(n.spc_client_push_audio(handle, ctypes.cast(buf, ctypes.POINTER(ctypes.c_int16)), frames), "push")

    def push_end(self) -> None:
        _check(n.spc_client_push_end(self._h()), "push_end")

    def wait_idle(self, timeout: Optional[float] = None) -> bool:
        """True once the client is idle and every callback so far has run; False on timeout."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        status = n.spc_client_wait_idle(self._h(), ms)
        if status == n.Status.TIMEOUT:
            return False
        _check(status, "wait_idle")
        return True

    # -- updates as iterators

    def updates(self, timeout: Optional[float] = None) -> Iterator[Update]:
        """Yields segments and start/stop/error events in order, until the client is idle
        again after a stop (or closed). `timeout` bounds the wait for each next update."""
        while True:
            try:
                update = self._updates.get(timeout=0.05)
            except queue.Empty:
                if self._callback_error is not None:
                    self._h()
                if self._handle is None:
                    return
                if timeout is not None:
                    timeout -= 0.05
                    if timeout <= 0:
                        raise error_for(n.Status.TIMEOUT, "no update arrived in time")
                continue
            yield update
            if isinstance(update, StopEvent) and self._updates.empty() and self._handle is not None \
                    and self.state in (n.State.IDLE, n.State.SUSPENDED):
                return

    async def aupdates(self) -> AsyncIterator[Update]:
        """The same stream of updates for asyncio code."""
        loop = asyncio.get_running_loop()
        q: "asyncio.Queue[Optional[Update]]" = asyncio.Queue()
        with self._lock:
            # Updates that arrived before the iterator started come first.
            while True:
                try:
                    q.put_nowait(self._updates.get_nowait())
                except queue.Empty:
                    break
            self._async_queues.append((loop, q))
        try:
            while True:
                update = await q.get()
                if update is None:
                    return
                yield update
                if isinstance(update, StopEvent) and q.empty() and self._handle is not None \
                        and self.state in (n.State.IDLE, n.State.SUSPENDED):
                    return
        finally:
            with self._lock:
                self._async_queues = [(l, x) for l, x in self._async_queues if x is not q]

    # -- trampolines (library callback thread)

    def _publish(self, update: Update, user: Optional[Callable]) -> None:
        if user is not None:
            try:
                user(update)
            except BaseException as e:  # never into C
                if self._callback_error is None:
                    self._callback_error = e
        with self._lock:
            targets = list(self._async_queues)
        if targets:
            for loop, q in targets:
                loop.call_soon_threadsafe(q.put_nowait, update)
            return
        if self._updates.qsize() >= MAX_BUFFERED_UPDATES:
            try:
                self._updates.get_nowait()
            except queue.Empty:
                pass
        self._updates.put_nowait(update)

    def _wake_async(self) -> None:
        with self._lock:
            targets = list(self._async_queues)
        for loop, q in targets:
            try:
                loop.call_soon_threadsafe(q.put_nowait, None)
            except RuntimeError:
                pass  # the loop is closed

    def _on_segment(self, client, segment, user_data) -> None:
        self._publish(copy_segment(segment), self._user["segment"])

    def _on_error(self, client, error, user_data) -> None:
        grpc = n.spc_error_grpc_status(error)
        self._publish(ErrorEvent(n.spc_error_code(error), _text(n.spc_error_message(error)),
                                 grpc if grpc >= 0 else None), self._user["error"])

    def _on_start(self, client, context_id, user_data) -> None:
        self._publish(StartEvent(_text(context_id)), self._user["start"])

    def _on_stop(self, client, context_id, user_data) -> None:
        self._publish(StopEvent(_text(context_id)), self._user["stop"])

    def _on_log(self, client, level, message, user_data) -> None:
        user = self._user["log"]
        if user is not None:
            try:
                user(n.LogLevel(level), _text(message))
            except BaseException as e:
                if self._callback_error is None:
                    self._callback_error = e
