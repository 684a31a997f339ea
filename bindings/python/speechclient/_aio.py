"""The asyncio side of Client: aupdates(), stream() and the Stream it returns.

It exists so that the event-loop plumbing (a loop.add_reader on the client's event fd, updates
handed from the callback thread to a loop, a stream's inbox and its early exits) stays apart from
the synchronous API in client.py, which needs none of it.
"""
from __future__ import annotations

import asyncio
import ctypes
import collections
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, AsyncIterable, AsyncIterator, Callable, Deque, Iterable, List, Optional, Set, Tuple, Union

from . import _native as n
from ._handle import MAX_BUFFERED_UPDATES, _IDLE_POLL_S, _WAIT_SLICE_S, _Buffer, _next_wait
from .errors import InvalidArgumentError, InvalidStateError, SpeechTimeoutError
from .types import PushAudio, StopEvent, Update

if TYPE_CHECKING:
    from .client import Client

# An aupdates() or stream() iterator: its loop, its inbox, and the thread running the loop.
_Sink = Tuple[asyncio.AbstractEventLoop, "_Inbox", int]
# A loop.add_reader on the event fd: the loop, the fd, and the loop's thread.
_Reader = Tuple[asyncio.AbstractEventLoop, int, int]


class _AsyncMixin:
    """Client's asyncio methods and the state they keep. Mixed into Client (client.py) ahead of
    _Handle, whose two hooks it fills in; uses Client's shared queue, delivery and _may_end()."""

    def __init__(self) -> None:
        super().__init__()
        self._async_sinks: List[_Sink] = []
        self._readers: List[_Reader] = []
        # Reader removals scheduled on another thread's loop, not run yet (close() waits for them,
        # or does them itself on that loop's thread): the loop, the fd, its thread, done.
        self._pending_removals: List[Tuple[asyncio.AbstractEventLoop, int, int, threading.Event]] = []
        self._stream_sink: Optional[_Sink] = None  # the running stream()'s, at most one
        # Waits for the idle event outside any iterator (a stream() behind an abandoned one).
        self._idle_waiters: List[Tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        # Contexts whose stream() was left before their stop event: until those stop events,
        # updates go to the shared queue (for updates()/aupdates()), never to a later stream().
        self._abandoned = 0
        # A stream() left early while listening: the rest of that listening goes to the shared
        # queue, and the next stream() waits for it to end first.
        self._abandoned_listen = False

    async def aupdates(self, timeout: Optional[float] = None) -> AsyncIterator[Update]:
        """updates() for asyncio: the same updates, ending the same way, without blocking the
        event loop. With thread delivery the callback thread puts each update in the
        iterator's inbox and wakes the loop (call_soon_threadsafe); with delivery="application"
        the loop watches the event fd and runs the callbacks itself. It starts nothing; stream()
        starts a context and ends with its stop event. One consumer at a time: a new aupdates()
        (or updates()) takes over from an earlier one left but not yet closed (its unread
        updates come first); one still iterated then raises InvalidStateError. An iterator
        whose task stops reading keeps the newest MAX_BUFFERED_UPDATES unread, as the shared
        queue does."""
        loop = asyncio.get_running_loop()
        inbox = _Inbox(loop)
        sink = (loop, inbox, threading.get_ident())
        with self._cond:
            taken_over = self._take_over_async_sinks_locked()
            inbox.items.extend(self._queue)  # theirs first, then the shared queue's
            self._queue.clear()
            self._async_sinks.append(sink)
        for old in taken_over:  # one still iterated (against the rule) raises
            self._wake_sink(old)
        reader = None
        seen_stop = False
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            # Inside the try: event_fd raises a callback's saved exception (or InvalidStateError
            # while another thread closes the client), and the sink registered above must go
            # with it; left registered, every later update went to its unread inbox, unbounded.
            if self.delivery == n.Delivery.APPLICATION and self._handle is not None:
                reader = self._watch_event_fd(loop)
            while True:
                self._raise_callback_error()
                if sink not in self._async_sinks:
                    raise InvalidStateError(n.Status.INVALID_STATE,
                                            "aupdates(): a newer aupdates() or updates() took over (one consumer at a time)")
                item = self._take(inbox)
                if item is None:
                    if self._handle is None:
                        # Closed (maybe from another thread since the take): every callback has
                        # run by now, and the last ones may have put updates in the inbox.
                        if inbox.items:
                            continue
                        return
                    if self._may_end(seen_stop):
                        seen_stop = True  # a hands-free listening ended: that counts as its stop
                        # Every callback so far has run, and put its update in the inbox.
                        if not inbox.items:
                            self._raise_callback_error()
                            return
                        continue
                    # The idle event (0.11) wakes this wait when the work ends; with an older
                    # library, hands-free listening can end with no update to wake it: look again.
                    wait = (None if self._idle_announced else _IDLE_POLL_S if seen_stop else
                            _WAIT_SLICE_S if self._listening_unseen() else None)
                    await inbox.wait(_next_wait(wait, deadline, "aupdates()", timeout))
                    continue
                seen_stop = seen_stop or isinstance(item, StopEvent)
                yield item
                deadline = None if timeout is None else time.monotonic() + timeout
        finally:
            if reader is not None:
                self._unwatch_event_fd(reader)
            self._drop_sink(sink)

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

    # -- the event fd in an event loop --------------------------------------------------------

    def _dispatch_quietly(self) -> None:  # loop.add_reader callback
        """Runs the pending callbacks for the loop. An exception a callback raised stays saved
        for the iterator (or the next call) to raise: raised here, it went to asyncio's
        exception handler, which only logs, and the stream ended as if nothing had happened."""
        if self.delivery != n.Delivery.APPLICATION or n.spc_client_dispatch is None:
            return
        with self._cond:
            if self._handle is None or self._closing:
                return
            self._busy += 1
            handle = self._handle
        try:
            n.spc_client_dispatch(handle, 0, ctypes.byref(ctypes.c_uint32(0)))
        finally:
            self._leave()

    def _watch_event_fd(self, loop: asyncio.AbstractEventLoop) -> _Reader:
        """Dispatches from `loop` whenever the event fd is readable. A loop has one reader per fd,
        so iterators on the same loop share it: the last one to leave removes it."""
        fd = self.event_fd
        reader = (loop, fd, threading.get_ident())
        with self._cond:
            # A removal another thread scheduled on this loop (a Stream collected there) and not
            # run yet is called off: the loop still watches the fd, now for this reader. Run
            # after this add_reader, it removed the new reader, and that iterator waited for
            # ever. (This runs on the loop's thread, so the removal cannot run meanwhile.)
            called_off = False
            for pending in list(self._pending_removals):
                if pending[0] is loop and pending[1] == fd and not pending[3].is_set():
                    pending[3].set()
                    self._pending_removals.remove(pending)
                    called_off = True
            shared = called_off or any(r[0] is loop and r[1] == fd for r in self._readers)
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
            if thread == threading.get_ident() or not loop.is_running():
                loop.remove_reader(fd)
            else:  # a Stream collected on another thread: removed on the loop's, and close()
                # waits for that before the fd can be closed and its number reused (a removal
                # run later would unwatch the descriptor that took the number).
                removed = threading.Event()
                pending = (loop, fd, thread, removed)
                with self._cond:
                    self._pending_removals.append(pending)

                def remove() -> None:
                    try:
                        if not removed.is_set():  # not done by close() on this thread already
                            loop.remove_reader(fd)
                    finally:
                        removed.set()
                        with self._cond:
                            if pending in self._pending_removals:
                                self._pending_removals.remove(pending)
                loop.call_soon_threadsafe(remove)
        except Exception:
            pass

    def _remove_readers(self) -> None:
        """Before the event fd is closed (close() frees the client right after): a loop still
        watching its number would take a descriptor that reuses it for the old one, and a later
        removal would unwatch the new one. A loop running on another thread removes it there, and
        this waits for that (a second at most: that loop may itself be waiting for this close)."""
        with self._cond:
            readers, self._readers = self._readers, []
            pending, self._pending_removals = self._pending_removals, []
        for loop, fd, thread, removed in pending:  # scheduled on a loop's thread by _unwatch_event_fd
            if thread == threading.get_ident() or not loop.is_running():
                # That loop is this thread's (or stopped): the removal cannot run while this
                # waits for it (a coroutine on it closing the client). Done here instead.
                try:
                    if not loop.is_closed():
                        loop.remove_reader(fd)
                except Exception:
                    pass
                removed.set()
            else:
                removed.wait(1.0)
        for loop, fd, thread in readers:
            try:
                if loop.is_closed():
                    continue
                if thread == threading.get_ident() or not loop.is_running():
                    loop.remove_reader(fd)
                else:
                    removed = threading.Event()

                    def remove(loop: asyncio.AbstractEventLoop = loop, fd: int = fd,
                               removed: threading.Event = removed) -> None:
                        try:
                            loop.remove_reader(fd)
                        finally:
                            removed.set()
                    loop.call_soon_threadsafe(remove)
                    removed.wait(1.0)
            except Exception:
                pass

    # -- updates handed to the loops ----------------------------------------------------------

    def _wake_async(self) -> None:
        """Every async wait looks at the client again: iterators, streams, idle waiters."""
        with self._cond:
            sinks = self._sinks()
            waiters = list(self._idle_waiters)
        for sink in sinks:
            self._wake_sink(sink)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # its loop is closed
                pass

    def _sinks(self) -> List[_Sink]:
        """Every async iterator's sink (under self._cond)."""
        return self._async_sinks + ([self._stream_sink] if self._stream_sink is not None else [])

    # Updates go into an iterator's inbox at once, under the client's lock (Client._emit), and
    # only the wake goes through its loop. Handed to the loop instead (call_soon_threadsafe), an
    # update was still in flight when an iterator left: it landed in the shared queue behind
    # later ones, or was lost with a loop closed before it ran.

    def _take(self, inbox: "_Inbox") -> Optional[Update]:
        with self._cond:
            if not inbox.items:
                return None
            item = inbox.items.popleft()
            inbox.also_delivered.discard(id(item))
            return item

    def _wake_sink(self, sink: "_Sink") -> None:
        loop, inbox, thread = sink
        try:
            if loop.is_closed():
                raise RuntimeError("Event loop is closed")
            if thread == threading.get_ident():
                inbox.wake()  # inside dispatch() on the loop's own thread
            else:
                loop.call_soon_threadsafe(inbox.wake)
        except RuntimeError:
            # The loop is closed: an aupdates() iterator on it can never run again, and what it
            # holds goes to the shared queue (for updates()). A stream() left so ends in its
            # __del__, which does the same and stops its context.
            if sink is not self._stream_sink:
                self._drop_sink(sink)
            else:
                # A stream() still referenced (so never collected) on a closed loop never runs
                # again: it took every later update of the client into an inbox nobody reads
                # (updates() got nothing, a new stream() was refused). Finished here, as its
                # __del__ would: its updates go to the shared queue, its context is stopped.
                owner = inbox.owner() if inbox.owner is not None else None
                if owner is not None and self._cond.acquire(blocking=False):
                    self._cond.release()
                    owner._finish()

    def _take_over_async_sinks_locked(self) -> List["_Sink"]:
        """One consumer at a time: an aupdates() iterator still registered was left (`break`)
        but not finalised yet (asyncio closes it later, as a task). A new consumer takes over:
        the unread updates of such iterators go to the front of the shared queue, and they are
        unregistered. Left registered, one took a copy of every update and kept what it had not
        read (a StopEvent the new consumer then waited for). Returns them, to be woken."""
        taken = list(self._async_sinks)
        unread: List[Update] = []
        for old in taken:
            unread.extend(old[1].items)
            old[1].items.clear()
        self._async_sinks.clear()
        if unread:
            merged = unread + list(self._queue)
            self._queue.clear()
            self._queue.extend(merged)
        return taken

    def _drop_sink(self, sink: "_Sink") -> None:
        """An aupdates() iterator ended: what arrived for it and was not taken goes back to the
        front of the shared queue, ahead of what comes later."""
        with self._cond:
            if sink in self._async_sinks:
                self._async_sinks.remove(sink)
            items = sink[1].items
            if items:
                # In front of the shared queue; past its bound the oldest go, as on append
                # (extendleft on a full deque dropped the newest: the StopEvent updates() waits for).
                merged = list(items) + list(self._queue)
                items.clear()
                self._queue.clear()
                self._queue.extend(merged)
            self._cond.notify_all()


class _Inbox:
    """An iterator's updates (aupdates() or stream()): a deque, changed only under the client's
    lock, and a future to wake the waiting iterator. A wake with no wait under way is kept for
    the next wait: the idle event, dispatched while the iterator looks at the client (inside
    its own check for the end), must still end the wait that follows. A wait that times out or
    is cancelled leaves every item in place (asyncio.wait_for on Queue.get may not)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        # Bounded as the shared queue is: an iterator that stops reading (its task awaiting
        # something else) while the client goes on does not grow without bound; past
        # MAX_BUFFERED_UPDATES unread, the oldest go.
        self.items: Deque[Update] = collections.deque(maxlen=MAX_BUFFERED_UPDATES)
        # ids of the updates in `items` that an aupdates() inbox received too (a stream()'s
        # inbox only): alive while in `items`, so an id names one update.
        self.also_delivered: Set[int] = set()
        self._loop = loop
        self._waiter: Optional["asyncio.Future[None]"] = None
        self._woken = False
        # The stream() whose inbox this is (weakly: an inbox must not keep it alive), or None.
        self.owner: Optional[Callable[[], Any]] = None

    def wake(self) -> None:  # on the loop's thread
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        else:
            self._woken = True

    async def wait(self, timeout: Optional[float]) -> None:
        if self.items or self._woken:
            self._woken = False
            return
        self._waiter = self._loop.create_future()
        try:
            await asyncio.wait({self._waiter}, timeout=timeout)
        finally:
            self._waiter = None


async def _feed(client: "Client", pcm: Union[Iterable[_Buffer], AsyncIterable[_Buffer]]) -> None:
    """A stream()'s pcm into the client, then push_end(). Module-level, holding no Stream, so a
    dropped Stream is not kept alive by its own task. With push_wait_ms a push may wait for room
    (up to an hour): it waits on an executor thread, not on the loop, which went on with nothing
    meanwhile (no callbacks, no timeout, no cancellation, no close())."""
    loop = asyncio.get_running_loop()

    async def push(chunk: _Buffer) -> None:
        if client._push_waits:
            await loop.run_in_executor(None, client.push, chunk)
        else:
            client.push(chunk)

    if hasattr(pcm, "__aiter__"):
        async for chunk in pcm:  # type: ignore[union-attr]
            await push(chunk)
    else:
        for chunk in pcm:  # type: ignore[union-attr]
            await push(chunk)
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
        self._awaited = False  # an __anext__ is running (one at a time, as an async generator)

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
        if self._awaited:
            # One waiter per inbox: a second replaced the first, which then never woke.
            raise InvalidStateError(n.Status.INVALID_STATE,
                                    "stream(): another task is already awaiting this stream's next update")
        self._awaited = True
        try:
            if not self._begun:
                self._begun = True
                await self._wait_for_abandoned_listening()
                self._begin()
            return await self._next()
        except BaseException:  # StopAsyncIteration, errors, cancellation: clean up at once
            self._finish()
            raise
        finally:
            self._awaited = False

    async def _wait_for_abandoned_listening(self) -> None:
        """A hands-free stream() left early has no StopEvent to mark the end of its listening:
        wait until the client is idle (its updates going to the shared queue meanwhile), so
        none of them reaches this stream."""
        c = self._client
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        if not c._idle_announced:  # a library older than 0.11: nothing says the work ended
            while c._abandoned_listen and c._handle is not None:
                if c._idle_now():
                    with c._cond:
                        c._abandoned_listen = False
                    return
                self._check_abandoned_deadline(deadline)
                await asyncio.sleep(_IDLE_POLL_S)
            return
        # The idle event ends the wait: the loop dispatches the event fd meanwhile (a listening
        # stopped between two contexts ends with no other event).
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        waiter = (loop, woken)
        reader = c._watch_event_fd(loop)
        with c._cond:
            c._idle_waiters.append(waiter)
        try:
            while c._abandoned_listen and c._handle is not None:
                woken.clear()
                if c._idle_now():
                    with c._cond:
                        c._abandoned_listen = False
                    return
                self._check_abandoned_deadline(deadline)
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    await asyncio.wait_for(woken.wait(), left)
                except asyncio.TimeoutError:
                    pass
        finally:
            with c._cond:
                c._idle_waiters.remove(waiter)
            c._unwatch_event_fd(reader)

    def _check_abandoned_deadline(self, deadline: Optional[float]) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            raise SpeechTimeoutError(n.Status.TIMEOUT, f"stream(): the listening left before did not end "
                                                       f"within {self._timeout} s")

    def _begin(self) -> None:
        c = self._client
        loop = asyncio.get_running_loop()
        if c._stream_sink is not None:
            raise InvalidStateError(n.Status.INVALID_STATE, "stream(): another stream() of this client is running "
                                                            "(leave its loop or aclose() it first)")
        # What is pending from before belongs to earlier contexts: dispatched now, it goes to the
        # shared queue (or to a context left early), not to this stream.
        c._dispatch_all()
        if c._abandoned and c._idle_now():
            # Idle with every callback run: no context left early still has a StopEvent to
            # come. A stop that cancelled a start queued behind another context's stop brings
            # none, and the count stayed up: every later stream's updates went to the shared
            # queue, and the stream waited for ever.
            with c._cond:
                c._abandoned = 0
        with c._cond:
            # An earlier context still stopping (a stop() made before this stream, or a stream
            # left early) has exactly one StopEvent to come, and it is not this stream's: taken
            # as its own, the stream got that context's last updates, ended on its stop, and its
            # own context ran unwatched. Counting the streams left early was wrong both ways: a
            # stop() outside any stream was not counted, and a stream whose queued start a stop
            # cancelled counted one StopEvent that never comes (a later stream waited for ever).
            # Read under the lock: the StopEvent, routed under it too, cannot slip in between.
            if c._handle is not None and not c._closing:
                state = n.c_state()
                if n.spc_client_get_state(c._handle, ctypes.byref(state)) == n.Status.OK and state.value == n.State.STOPPING:
                    c._abandoned = 1
        self._loop, self._thread = loop, threading.get_ident()
        self._inbox = _Inbox(loop)
        self._inbox.owner = weakref.ref(self)
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
            self._feeder.add_done_callback(lambda _task: inbox.wake())

    async def _next(self) -> Update:
        c, inbox = self._client, self._inbox
        assert inbox is not None
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            c._raise_callback_error()
            item = c._take(inbox)
            if item is not None:
                if isinstance(item, StopEvent) and not self._hands_free:
                    self._stopped = True
                    self._finish()  # updates after the stop go to the shared queue
                return item
            if c._handle is None:
                if inbox.items:  # put there by the callbacks of a close from another thread
                    continue
                raise StopAsyncIteration
            if self._hands_free and c._may_end(True):
                if inbox.items:  # dispatched while looking: yield them first
                    continue
                self._stopped = True
                raise StopAsyncIteration
            feeder = self._feeder
            if feeder is not None and feeder.done() and not feeder.cancelled() and feeder.exception() is not None:
                raise feeder.exception()  # type: ignore[misc]
            # An older library's hands-free listening can end unannounced: looked for again.
            wait = _WAIT_SLICE_S if self._hands_free and not c._idle_announced else None
            await inbox.wait(_next_wait(wait, deadline, "stream()", self._timeout))

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
            leftovers = list(inbox.items) if inbox is not None else []
            # Whether its StopEvent came, from everything it received: one an aupdates() beside it
            # got too (filtered out below) is its stop all the same. Counted as not come, the
            # stream was taken for abandoned: a stray stop could end a later context.
            stop_came = not self._hands_free and any(isinstance(x, StopEvent) for x in leftovers)
            if inbox is not None:
                inbox.items.clear()
                # What an aupdates() running beside this stream received too is that consumer's
                # already (read, or handed on when it ends): queued again, it came twice.
                also = inbox.also_delivered
                leftovers = [x for x in leftovers if id(x) not in also]
                also.clear()
            if leftovers:  # not lost: for updates()/aupdates()
                c._queue.extend(leftovers)
                c._cond.notify_all()
            stopped = self._stopped or stop_came
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
