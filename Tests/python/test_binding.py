"""The Python binding against the real library, without a server: a closed port on loopback gives
the documented network error (error event NETWORK, then a stop event with context id "")."""
import array
import asyncio
import ctypes
import gc
import os
import subprocess
import sys
import threading
import time

import pytest

import speechclient as sc
from speechclient import _native
from speechclient.client import MAX_BUFFERED_UPDATES
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
UNREACHABLE = "grpc://127.0.0.1:1"  # a closed port on loopback: the network error at once
DEVICE_ID = "12345678-1234-4234-8234-123456789abc"  # fixed, so no id is generated or persisted


def push_client(rate=16000, channels=1, **kw):
    return sc.Client(UNREACHABLE, app_id="py", audio=sc.PushAudio(rate, channels), device_id=DEVICE_ID, **kw)


def file_client(wav, cache_dir, **kw):
    return sc.Client(UNREACHABLE, app_id="py", audio=sc.WavFile(str(wav)), cache_dir=cache_dir, **kw)


needs_state_and_delivery = pytest.mark.skipif(
    not _native.HAS_STATE_AND_DELIVERY, reason="the library has no state callback or application delivery yet")


def without_states(updates):
    return [u for u in updates if not isinstance(u, sc.StateEvent)]


def assert_unreachable_run(updates):
    """What one start against the closed port gives: NETWORK naming the address, then the stop."""
    updates = without_states(updates)
    assert [type(u) for u in updates] == [sc.ErrorEvent, sc.StopEvent], updates
    assert updates[0].code == sc.Status.NETWORK
    assert "127.0.0.1:1" in updates[0].message
    assert updates[0].grpc_status == 14  # UNAVAILABLE, as the header promises for a refused connection
    assert isinstance(updates[0].exception(), sc.NetworkError)
    assert updates[1] == sc.StopEvent("")


# -- version and statuses ----------------------------------------------------------------------

def test_capture_devices_are_listed_with_names_for_the_microphone():
    """0.8: audio_devices() as `arecord -L` lists them; ALSA's null device is always there."""
    devices = sc.audio_devices()
    assert all(isinstance(d, sc.AudioDevice) and d.name for d in devices), devices
    null = [d for d in devices if d.name == "null"]
    assert null and null[0].description, devices
    # The name is what Microphone(device=...) takes: the null device opens and gives silence.
    with sc.Client(url=UNREACHABLE, app_id="a", audio=sc.Microphone(device="null"), prepare_on_init=False) as c:
        assert c.state == sc.State.IDLE


def test_the_connection_state_on_demand(cache_dir):
    """0.8: IDLE before any connection; UNAVAILABLE once a start found nothing listening."""
    with sc.Client(url=UNREACHABLE, app_id="a", audio=sc.PushAudio(16000, 1), cache_dir=cache_dir) as c:
        assert c.connection_state == sc.ConnectionState.IDLE
        c.start()
        assert c.wait_idle(10)
        assert c.connection_state == sc.ConnectionState.UNAVAILABLE


def test_version_of_the_loaded_library():
    number = sc.version_number()
    assert number == _native.spc_version_number()
    assert number // 1_000_000 == _native.SPC_VERSION_MAJOR
    assert sc.version() == f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"
    assert (_native.SPC_VERSION_NUMBER ==
            _native.SPC_VERSION_MAJOR * 1_000_000 + _native.SPC_VERSION_MINOR * 1000 + _native.SPC_VERSION_PATCH)


@pytest.mark.skipif(not _native.HAS_APPLICATION_IO, reason="the library has no application-driven I/O (0.3)")
def test_the_application_io_descriptor_is_one_per_process():
    fd = sc.io_fd()
    assert fd >= 0 and sc.io_fd() == fd
    os.fstat(fd)  # an open descriptor (the library owns it)
    assert sc.io_process() == 0  # no connection of this process is application-driven: nothing ready
    assert sc.io_dispatch() == (0, 0)
    with sc.Client(url=UNREACHABLE, app_id="a", io="application") as c:
        assert c.io == sc.NetworkIO.APPLICATION


def test_application_io_errors(monkeypatch):
    # A library without 0.3: the functions and the option say so (nothing reaches C).
    monkeypatch.setattr(_native, "HAS_APPLICATION_IO", False)
    for call in (sc.io_fd, sc.io_process):
        with pytest.raises(sc.InvalidStateError, match=r"without application-driven network I/O \(0\.3\)") as info:
            call()
        # The status is the exception's own, and the message starts with the library's path.
        assert info.value.code == sc.Status.INVALID_STATE
        assert str(info.value).startswith(f"{_native.LIBRARY_PATH} is libspeechclient {sc.version()}, without")
    with pytest.raises(sc.InvalidArgumentError, match=r"io='application'.*\(0\.3\)") as info:
        sc.Client(url=UNREACHABLE, app_id="a", io="application")
    assert info.value.option == "io"
    sc.Client(url=UNREACHABLE, app_id="a", io="library").close()  # the default needs nothing new
    monkeypatch.undo()
    # The library's own failures (its network thread could not start) become exceptions.
    monkeypatch.setattr(_native, "spc_io_fd", lambda: -1)
    with pytest.raises(sc.InternalError, match="could not be started") as info:
        sc.io_fd()
    assert info.value.code == sc.Status.INTERNAL and str(info.value).startswith("spc_io_fd:")
    monkeypatch.setattr(_native, "spc_io_process", lambda out: int(sc.Status.INTERNAL))
    with pytest.raises(sc.InternalError, match="spc_io_process"):
        sc.io_process()
    monkeypatch.setattr(_native, "spc_io_dispatch", lambda ready, ran: int(sc.Status.INTERNAL))
    with pytest.raises(sc.InternalError, match="spc_io_dispatch"):
        sc.io_dispatch()
    # A 0.3 library: no spc_io_dispatch.
    monkeypatch.setattr(_native, "HAS_IO_DISPATCH", False)
    with pytest.raises(sc.InvalidStateError, match=r"without spc_io_dispatch \(0\.4\)") as info:
        sc.io_dispatch()
    assert info.value.code == sc.Status.INVALID_STATE
    assert str(info.value).startswith(f"{_native.LIBRARY_PATH} is libspeechclient")


def test_the_library_is_the_one_named_by_the_environment():
    assert os.path.realpath(_native.LIBRARY_PATH) == os.path.realpath(os.environ["SPEECHCLIENT_LIBRARY"])


def test_a_library_that_does_not_load_is_a_clear_import_error(tmp_path):
    env = dict(os.environ, SPEECHCLIENT_LIBRARY=str(tmp_path / "nope.so"))
    r = subprocess.run([sys.executable, "-c", "import speechclient"], capture_output=True, text=True, env=env,
                       cwd=str(ROOT / "bindings" / "python"), timeout=60)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "SPEECHCLIENT_LIBRARY" in r.stderr and "nope.so" in r.stderr


EXPECTED_CLASSES = {
    sc.Status.INVALID_ARGUMENT: sc.InvalidArgumentError,
    sc.Status.INVALID_STATE: sc.InvalidStateError,
    sc.Status.NO_MEMORY: sc.NoMemoryError,
    sc.Status.NETWORK: sc.NetworkError,
    sc.Status.TLS: sc.TLSError,
    sc.Status.TIMEOUT: sc.SpeechTimeoutError,
    sc.Status.AUTH: sc.AuthError,
    sc.Status.API: sc.APIError,
    sc.Status.PARSE: sc.ParseError,
    sc.Status.AUDIO: sc.AudioError,
    sc.Status.INTERNAL: sc.InternalError,
}


def test_status_values_are_the_headers():
    assert {s.name: int(s) for s in sc.Status} == {
        "OK": 0, "INVALID_ARGUMENT": 1, "INVALID_STATE": 2, "NO_MEMORY": 3, "NETWORK": 4, "TLS": 5, "TIMEOUT": 6,
        "AUTH": 7, "API": 8, "PARSE": 9, "AUDIO": 10, "INTERNAL": 11}
    assert [int(x) for x in sc.LogLevel] == [0, 1, 2, 3, 4]
    assert [int(x) for x in sc.State] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("status", list(EXPECTED_CLASSES))
def test_every_status_maps_to_its_exception_class(status):
    e = sc.error_for(status, "what went wrong", 14)
    assert type(e) is EXPECTED_CLASSES[status]
    assert sc.EXCEPTIONS[status] is EXPECTED_CLASSES[status]
    assert isinstance(e, sc.SpeechClientError)
    assert (e.code, e.message, e.grpc_status) == (status, "what went wrong", 14)
    assert str(e) == "what went wrong"
    assert sc.status_text(status) not in ("", "unknown status")


def test_exceptions_fit_pythons_own_hierarchy():
    assert issubclass(sc.InvalidArgumentError, ValueError)
    assert issubclass(sc.NetworkError, ConnectionError)
    assert issubclass(sc.SpeechTimeoutError, TimeoutError)
    assert issubclass(sc.NoMemoryError, MemoryError)
    e = sc.SpeechClientError(sc.Status.API, "server said no", -1)
    assert e.grpc_status is None  # -1 in C: not a gRPC status
    unknown = sc.error_for(99, "m")
    assert isinstance(unknown, sc.InternalError) and "99" in unknown.message
    assert sc.status_text(99) == "unknown status"
    # A message where the status belongs is the caller's bug, not an "unknown status".
    with pytest.raises(TypeError, match="the first argument is the status"):
        sc.InvalidStateError("the client is closed")


# -- options -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, text", [
    (dict(url="ftp://example.com"), "url='ftp://example.com'"),
    (dict(url="grpc://host/path"), "url='grpc://host/path'"),
    (dict(url=""), "url=''"),
    (dict(chunk_ms=5), "chunk_ms=5"),
    (dict(chunk_ms=1001), "chunk_ms=1001"),
    (dict(chunk_ms=-1), "chunk_ms=-1"),
    (dict(chunk_ms="100"), "chunk_ms='100'"),
    (dict(audio=sc.PushAudio(1000, 1)), "PushAudio(sample_rate=1000, channels=1)"),
    (dict(audio=sc.PushAudio(16000, 9)), "PushAudio(sample_rate=16000, channels=9)"),
    (dict(audio=sc.PushAudio(16000, 0)), "PushAudio(sample_rate=16000, channels=0)"),
    (dict(device_id="not-a-uuid"), "device_id='not-a-uuid'"),
    (dict(app_id="a\0b"), "NUL"),
    (dict(audio="mic"), "audio='mic'"),
    (dict(delivery="sometimes"), "delivery='sometimes'"),
    (dict(io="kernel"), "io='kernel'"),
    (dict(io=7), "7"),
    (dict(reconnect=(101, 200, 5000)), "reconnect=(101, 200, 5000)"),
    (dict(stream_budget=1000), "stream_budget=1000"),
    (dict(drain_timeout_ms=10), "drain_timeout_ms=10"),
    (dict(keepalive=(500, 10000)), "keepalive=(500, 10000)"),
    (dict(keepalive=5000), "keepalive=5000"),
    (dict(push_wait_ms=3600001), "push_wait_ms=3600001"),
    (dict(timeouts=(99, 10000, 10000)), "timeouts=(99, 10000, 10000)"),
    (dict(timeouts=(5000, 10000)), "timeouts=(5000, 10000)"),
])
def test_a_rejected_option_raises_invalid_argument_naming_it_and_its_value(kwargs, text):
    args = dict(url=UNREACHABLE, app_id="a")
    args.update(kwargs)
    with pytest.raises(sc.InvalidArgumentError) as info:
        sc.Client(**args)
    assert text in str(info.value)
    assert info.value.code == sc.Status.INVALID_ARGUMENT
    assert info.value.option == next(iter(kwargs))  # which option it was


def _raw_client_new_message(**setters):
    """The message spc_client_new itself gives for options filled by the raw layer."""
    o = _native.spc_options_new()
    try:
        for name, value in setters.items():
            getattr(_native, f"spc_options_set_{name}")(o, value)
        handle, err = _native.client_p(), _native.error_p()
        status = _native.spc_client_new(o, ctypes.byref(handle), ctypes.byref(err))
        assert status != 0
        message = _native.spc_error_message(err).decode()
        _native.spc_error_free(err)
        return status, message
    finally:
        _native.spc_options_free(o)


def test_client_new_failures_carry_the_librarys_own_message():
    status, message = _raw_client_new_message(server_url=UNREACHABLE.encode())
    with pytest.raises(sc.InvalidArgumentError) as info:
        sc.Client(UNREACHABLE)  # neither app id nor project id
    assert status == sc.Status.INVALID_ARGUMENT
    assert info.value.message == message and message
    assert info.value.option is None  # not a setter's rejection


def test_missing_wav_is_an_audio_error_naming_the_path(tmp_path):
    missing = tmp_path / "missing.wav"
    status, message = _raw_client_new_message(server_url=UNREACHABLE.encode(), app_id=b"a",
                                              audio_file=str(missing).encode())
    with pytest.raises(sc.AudioError) as info:
        sc.Client(UNREACHABLE, app_id="a", audio=sc.WavFile(missing))  # a PathLike works too
    assert str(missing) in str(info.value)
    assert info.value.message == message


def test_a_file_that_is_not_wav_is_an_audio_error_naming_it(tmp_path):
    bogus = tmp_path / "bogus.wav"
    bogus.write_bytes(b"this is not a RIFF file at all" * 10)
    with pytest.raises(sc.AudioError) as info:
        sc.Client(UNREACHABLE, app_id="a", audio=sc.WavFile(str(bogus)))
    assert str(bogus) in str(info.value)


def test_prepare_on_init_raises_the_network_error(cache_dir):
    with pytest.raises(sc.NetworkError) as info:
        sc.Client(UNREACHABLE, app_id="a", audio=sc.PushAudio(), prepare_on_init=True, cache_dir=cache_dir,
                   device_id=DEVICE_ID)
    assert "127.0.0.1:1" in info.value.message


def test_every_option_is_accepted(tmp_path, cache_dir):
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    with sc.Client(url="grpc+tls://example.invalid:443", app_id="a", project_id="p", language="fi-FI",
                   device_id=DEVICE_ID.upper(), cache_dir=cache_dir, ca_file=ca, insecure_tls=True,
                   audio=sc.PushAudio(48000, 2), chunk_ms=20, context_options={"timezone": "UTC",
                                                                                "vocabulary": ["a", "b"]},
                   log_level=sc.LogLevel.DEBUG, identity_url="https://login.example.invalid",
                   reconnect=(0, 1, 1), replay_buffer_ms=1000, context_limit_ms=1000) as c:
        assert c.state == sc.State.IDLE
    # 0.5: bounded streams, drain timeout, keepalive, unlimited reconnection (None).
    with sc.Client(url=UNREACHABLE, app_id="a", audio=sc.PushAudio(16000, 1), cache_dir=cache_dir,
                   reconnect=(None, 200, 5000), stream_budget=65536, drain_timeout_ms=100,
                   keepalive=(0, 100), push_wait_ms=1000) as c:
        assert c.state == sc.State.IDLE
    # 0.8: connect, login and start timeouts.
    with sc.Client(url=UNREACHABLE, app_id="a", audio=sc.PushAudio(16000, 1), cache_dir=cache_dir,
                   timeouts=(100, 600000, 2500)) as c:
        assert c.state == sc.State.IDLE


# -- lifecycle against the unreachable server --------------------------------------------------

def test_unreachable_server_network_error_then_stop_through_updates(silent_wav, cache_dir):
    seen = []
    with file_client(silent_wav, cache_dir, on_error=seen.append, on_stop=seen.append,
                     on_start=seen.append) as c:
        assert c.state == sc.State.IDLE
        c.start()
        updates = list(c.updates(timeout=20))
        assert_unreachable_run(updates)
        assert seen == without_states(updates)  # the callbacks saw the same, in the same order
        assert c.wait_idle(5) is True
        assert c.state == sc.State.IDLE
        # The client can start again, and the iterator ends again.
        c.start()
        assert_unreachable_run(c.updates(timeout=20))


def test_unreachable_server_through_aupdates(silent_wav, cache_dir):
    async def run():
        with file_client(silent_wav, cache_dir) as c:
            c.start()
            updates = [u async for u in c.aupdates(timeout=20)]
            assert c.wait_idle(5)
            return updates, c.state
    updates, state = asyncio.run(asyncio.wait_for(run(), 30))
    assert_unreachable_run(updates)
    assert state == sc.State.IDLE


@needs_state_and_delivery
def test_the_connection_state_events(silent_wav, cache_dir):
    states = []
    with file_client(silent_wav, cache_dir, on_state=states.append) as c:
        c.start()
        assert c.wait_idle(20)
    assert [s.state for s in states] == [sc.ConnectionState.CONNECTING, sc.ConnectionState.UNAVAILABLE]
    assert states[1].reason is not None and states[1].reason.code == sc.Status.NETWORK


def test_log_lines_reach_on_log(cache_dir):
    lines = []
    with sc.Client("grpc+tls://127.0.0.1:1", app_id="a", audio=sc.PushAudio(), insecure_tls=True,
                   device_id=DEVICE_ID, cache_dir=cache_dir, log_level=sc.LogLevel.DEBUG,
                   on_log=lambda level, text: lines.append((level, text))) as c:
        c.start()
        assert c.wait_idle(20)
    assert (sc.LogLevel.WARNING, "TLS certificate verification is OFF (insecure_tls)") in lines
    assert all(isinstance(level, sc.LogLevel) and isinstance(text, str) for level, text in lines)


def test_wait_idle_times_out_and_updates_times_out():
    with push_client() as c:
        assert c.wait_idle(0) is True
        with pytest.raises(sc.SpeechTimeoutError, match=r"^updates\(\): no update within 0.2 s$"):
            next(iter(c.updates(timeout=0.2)))  # idle, nothing happens: no update in time

        async def next_async_update():
            return await c.aupdates(timeout=0.2).__anext__()
        t0 = time.monotonic()
        with pytest.raises(sc.SpeechTimeoutError, match=r"^aupdates\(\): no update within 0.2 s$"):
            asyncio.run(next_async_update())
        assert 0.15 <= time.monotonic() - t0 < 5


@needs_state_and_delivery
def test_application_delivery_runs_callbacks_on_the_callers_thread(silent_wav, cache_dir):
    threads = set()
    with file_client(silent_wav, cache_dir, delivery="application",
                     on_error=lambda e: threads.add(threading.get_ident())) as c:
        assert c.event_fd >= 0
        c.start()
        assert_unreachable_run(c.updates(timeout=20))
        assert c.dispatch() == 0
        c.start()
        assert c.wait_idle(20)  # runs the callbacks itself
        assert_unreachable_run(list(c.updates(timeout=1)))
    assert threads == {threading.get_ident()}
    with push_client() as t:
        assert t.event_fd == -1
        with pytest.raises(sc.InvalidStateError):
            t.dispatch()


@needs_state_and_delivery
def test_application_delivery_waits_on_an_event_fd_numbered_past_1024(silent_wav, cache_dir):
    """updates() and wait_idle() wait on the event fd with poll: select() refused a descriptor
    numbered 1024 or more (ValueError), which a process with many clients soon has."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        with file_client(silent_wav, cache_dir, delivery="application") as c:
            assert c.event_fd >= 1024
            c.start()
            assert_unreachable_run(list(c.updates(timeout=20)))
            c.start()
            assert c.wait_idle(20)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@needs_state_and_delivery
def test_application_delivery_with_asyncio(silent_wav, cache_dir):
    threads = set()

    async def run():
        with file_client(silent_wav, cache_dir, delivery="application",
                         on_stop=lambda e: threads.add(threading.get_ident()),
                         on_state=lambda e: threads.add(threading.get_ident())) as c:
            c.start()
            return [u async for u in c.aupdates(timeout=20)]

    updates = asyncio.run(asyncio.wait_for(run(), 30))
    assert threads == {threading.get_ident()}
    assert_unreachable_run(updates)
    assert [s.state for s in updates if isinstance(s, sc.StateEvent)] == [
        sc.ConnectionState.CONNECTING, sc.ConnectionState.UNAVAILABLE]


# -- stream(): asyncio on application delivery --------------------------------------------------

def silent_push_client(silent_server, cache_dir, **kw):
    """Logs in to a server that never answers: its context stays STARTING until close_all(); no
    reconnection, so one reset ends it."""
    return sc.Client(silent_server.url, app_id="a", audio=sc.PushAudio(), device_id=DEVICE_ID, cache_dir=cache_dir,
                     delivery="application", reconnect=(0, 1, 1), **kw)


def has_reader(loop, fd):
    """Whether `loop` watches fd for reading (asyncio has no public query: its selector's key)."""
    try:
        key = loop._selector.get_key(fd)
    except KeyError:
        return False
    reader = key.data[0]
    return reader is not None and not reader.cancelled()


@needs_state_and_delivery
def test_close_from_another_thread_unwatches_the_event_fd_before_freeing_it(silent_server, cache_dir):
    """close() on another thread, while an event loop watches the event fd, has that loop stop
    watching it before the fd is closed. The removal was only scheduled: the fd was closed with
    the loop still watching its number, which a new descriptor then reuses (its reader never
    fired, and the late removal unwatched it)."""
    result = {}

    async def run():
        loop = asyncio.get_running_loop()
        c = silent_push_client(silent_server, cache_dir)
        c.start()
        first = asyncio.ensure_future(c.aupdates(timeout=20).__anext__())
        await asyncio.sleep(0.2)
        fd = c.event_fd
        assert has_reader(loop, fd)

        def close_elsewhere():
            c.close()
            result["watched"] = has_reader(loop, fd)  # the fd is closed by now
        t = threading.Thread(target=close_elsewhere)
        t.start()
        time.sleep(0.3)  # the loop is busy while the other thread closes
        await loop.run_in_executor(None, t.join)
        first.cancel()
        try:
            await first
        except (asyncio.CancelledError, StopAsyncIteration, sc.SpeechClientError):
            pass
    asyncio.run(asyncio.wait_for(run(), 30))
    assert result["watched"] is False


async def until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def reset_until_idle(silent_server, client):
    """Resets the silent server's connections until the client's contexts have ended."""
    for _ in range(200):
        silent_server.close_all()
        if client.wait_idle(0.05):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the client did not become idle")


def test_stream_needs_application_delivery_and_checks_its_arguments(silent_wav, cache_dir):
    with push_client() as t:
        with pytest.raises(sc.InvalidStateError, match='delivery="application"'):
            t.stream()
    with file_client(silent_wav, cache_dir, delivery="application") as c:
        with pytest.raises(sc.InvalidArgumentError, match="WavFile, not PushAudio"):
            c.stream(b"\0\0")
    with push_client(delivery="application") as p:
        with pytest.raises(sc.InvalidArgumentError, match="not int"):
            p.stream(42)
        p.close()
        with pytest.raises(sc.InvalidStateError, match="closed"):
            p.stream()


@needs_state_and_delivery
def test_stream_starts_a_context_and_ends_after_its_stop_on_the_loops_thread(silent_wav, cache_dir):
    threads = set()

    async def run():
        loop = asyncio.get_running_loop()
        with file_client(silent_wav, cache_dir, delivery="application",
                         on_error=lambda e: threads.add(threading.get_ident())) as c:
            runs = []
            for _ in range(2):  # the client starts again after a stream
                runs.append([u async for u in c.stream(timeout=20)])
                assert not has_reader(loop, c.event_fd)
                assert c.state == sc.State.IDLE
            return runs

    runs = asyncio.run(asyncio.wait_for(run(), 30))
    assert threads == {threading.get_ident()}
    for updates in runs:
        assert isinstance(updates[-1], sc.StopEvent)  # the stop ends it
        assert_unreachable_run(updates)


@needs_state_and_delivery
@pytest.mark.parametrize("kind", ["bytes", "list", "async"])
def test_stream_pushes_pcm_and_tolerates_a_context_that_ended_first(kind, cache_dir):
    chunk = array.array("h", [0] * 1600)

    async def agen():
        for _ in range(3):
            yield chunk
            await asyncio.sleep(0)

    pcm = {"bytes": chunk.tobytes(), "list": [chunk] * 3, "async": agen()}[kind]

    async def run():
        with push_client(delivery="application", cache_dir=cache_dir) as c:
            updates = [u async for u in c.stream(pcm, timeout=20)]
            await asyncio.sleep(0.05)  # the feeding task has ended by now: no push_end error surfaced
            return updates, c.state

    updates, state = asyncio.run(asyncio.wait_for(run(), 30))
    assert_unreachable_run(updates)
    assert state == sc.State.IDLE


@needs_state_and_delivery
def test_an_exception_from_the_pcm_iterator_ends_the_stream(silent_server, cache_dir):
    async def pcm():
        yield b"\0" * 3200
        raise ValueError("microphone unplugged")

    async def run():
        loop = asyncio.get_running_loop()
        with silent_push_client(silent_server, cache_dir) as c:
            with pytest.raises(ValueError, match="unplugged"):
                async for _ in c.stream(pcm(), timeout=20):
                    pass
            assert not has_reader(loop, c.event_fd)
            assert c.state == sc.State.STOPPING  # the stream asked its context to stop
            await reset_until_idle(silent_server, c)

    asyncio.run(asyncio.wait_for(run(), 30))


@needs_state_and_delivery
def test_breaking_out_of_a_stream_removes_the_reader_and_the_next_stream_is_not_fooled(silent_server, cache_dir):
    async def run():
        loop = asyncio.get_running_loop()
        with silent_push_client(silent_server, cache_dir) as c:
            fd = c.event_fd
            async for first in c.stream(timeout=20):
                assert has_reader(loop, fd)
                break
            assert first == sc.StateEvent(sc.ConnectionState.CONNECTING, 0, 0, None)
            assert not has_reader(loop, fd)  # at once, without awaiting anything
            assert c.state == sc.State.STOPPING

            # The next stream starts at once (a start queued behind the pending stop) and must not
            # end on the first context's error and stop.
            second = []

            async def consume():
                async for u in c.stream(timeout=20):
                    second.append(u)

            task = asyncio.ensure_future(consume())
            await until(lambda: has_reader(loop, fd))
            assert silent_server.wait_for_connection()
            silent_server.close_all()  # ends the first context; the queued start connects again
            await until(lambda: any(isinstance(u, sc.StateEvent) for u in second))
            assert not task.done()
            assert silent_server.wait_for_connection()
            silent_server.close_all()  # ends the second
            await asyncio.wait_for(task, 20)
            assert not has_reader(loop, fd)
            # Nothing was lost: the first context's rest is in the queue updates() reads.
            first_rest = list(c.updates(timeout=5))
            return second, first_rest

    second, first_rest = asyncio.run(asyncio.wait_for(run(), 60))
    for updates in (second, first_rest):
        updates = without_states(updates)
        assert [type(u) for u in updates] == [sc.ErrorEvent, sc.StopEvent], updates
        assert updates[0].code == sc.Status.NETWORK


async def leave_a_stream_then_cancel_the_next_ones_start(c, loop):
    """Stream A left early (its context STOPPING), then stream B begun (its start queued behind
    A's stop) and left before A ended: the stop for B only cancels its queued start."""
    a = c.stream()
    await a.__anext__()
    await a.aclose()
    assert c.state == sc.State.STOPPING
    b = c.stream()
    first = asyncio.ensure_future(b.__anext__())
    await until(lambda: has_reader(loop, c.event_fd))
    first.cancel()
    try:
        await first
    except asyncio.CancelledError:
        pass
    await b.aclose()


def test_a_stream_left_while_its_start_was_queued_does_not_break_the_next_stream(silent_server, cache_dir):
    """Stream A left early (its context STOPPING), stream B begun (its start queued behind A's
    stop) and left before A ended: the stop for B only cancelled its queued start, which brings
    no StopEvent. The count of contexts left early stayed at one for good, and every later
    stream's updates went to the shared queue: stream C got nothing and timed out (without a
    timeout it waited for ever). Once the client is idle, no such StopEvent is to come."""
    async def run():
        loop = asyncio.get_running_loop()
        with silent_push_client(silent_server, cache_dir) as c:
            await leave_a_stream_then_cancel_the_next_ones_start(c, loop)
            await reset_until_idle(silent_server, c)
            list(c.updates(timeout=5))  # A's error and stop, left to the shared queue
            got = []

            async def consume():
                async for u in c.stream(timeout=10):
                    got.append(u)
            task = asyncio.ensure_future(consume())
            await until(lambda: has_reader(loop, c.event_fd))
            assert silent_server.wait_for_connection()
            await reset_until_idle(silent_server, c)
            await asyncio.wait_for(task, 20)
            return got

    got = without_states(asyncio.run(asyncio.wait_for(run(), 60)))
    assert [type(u) for u in got] == [sc.ErrorEvent, sc.StopEvent], got


def test_a_stream_begun_while_an_earlier_context_stops_gets_only_its_own_updates(silent_server, cache_dir):
    """start() and stop() outside any stream, the context still STOPPING (logging in), then a
    stream(): its start is queued behind that stop. The earlier context's error and StopEvent
    went to the stream, which ended on them while its own context ran on, unwatched."""
    async def run():
        loop = asyncio.get_running_loop()
        with silent_push_client(silent_server, cache_dir) as c:
            c.start()
            assert silent_server.wait_for_connection()
            c.stop()
            assert c.state == sc.State.STOPPING
            got = []

            async def consume():
                async for u in c.stream(timeout=20):
                    got.append(u)
            task = asyncio.ensure_future(consume())
            await until(lambda: has_reader(loop, c.event_fd))
            silent_server.close_all()  # the earlier context fails: its error and stop
            await until(lambda: any(isinstance(u, sc.StopEvent) for u in c._queue))  # to the shared queue
            assert not task.done(), got
            assert silent_server.wait_for_connection()  # the stream's own context
            await reset_until_idle(silent_server, c)
            await asyncio.wait_for(task, 20)
            return got

    got = without_states(asyncio.run(asyncio.wait_for(run(), 60)))
    assert [type(u) for u in got] == [sc.ErrorEvent, sc.StopEvent], got


def test_a_stream_begun_after_one_whose_queued_start_was_cancelled_gets_its_own_stop(silent_server, cache_dir):
    """As above (stream A left early, B's queued start cancelled), but stream C begins while A
    still stops: the count of streams left early (two, for one StopEvent to come) swallowed C's
    own StopEvent, and C waited until its timeout."""
    async def run():
        loop = asyncio.get_running_loop()
        with silent_push_client(silent_server, cache_dir) as c:
            await leave_a_stream_then_cancel_the_next_ones_start(c, loop)
            assert c.state == sc.State.STOPPING  # A still stops
            got = []

            async def consume():
                async for u in c.stream(timeout=20):
                    got.append(u)
            task = asyncio.ensure_future(consume())
            await until(lambda: has_reader(loop, c.event_fd))
            silent_server.close_all()  # A ends
            assert silent_server.wait_for_connection()  # C's own context
            await reset_until_idle(silent_server, c)
            await asyncio.wait_for(task, 20)
            return got

    got = without_states(asyncio.run(asyncio.wait_for(run(), 60)))
    assert [type(u) for u in got] == [sc.ErrorEvent, sc.StopEvent], got


def test_a_stream_still_referenced_after_its_loop_closed_leaves_the_updates_to_updates(silent_server, cache_dir):
    """A stream() left without aclose() (its first update taken, then the coroutine returned)
    and still referenced, so never collected, after asyncio.run() closed its loop: every later
    update of the client went into its inbox, which nobody can read again. updates() got
    nothing, and a new stream() was refused as "another stream() is running"."""
    with silent_push_client(silent_server, cache_dir) as c:
        s = c.stream(timeout=20)

        async def first():
            return await s.__anext__()
        asyncio.run(first())  # CONNECTING; the loop is closed, s lives on
        assert silent_server.wait_for_connection()
        silent_server.close_all()  # its context fails: its error and stop
        got = without_states(list(c.updates(timeout=10)))
        assert [type(u) for u in got] == [sc.ErrorEvent, sc.StopEvent], got
        assert c._stream_sink is None
        del s


def test_a_reader_removal_scheduled_from_another_thread_does_not_remove_the_next_reader(cache_dir):
    """A Stream finished on another thread (collected there) schedules its reader's removal on
    its loop. A new iterator watching the same fd on that loop before the removal ran added its
    reader, and the removal then took it away: that iterator was never dispatched."""
    async def run():
        loop = asyncio.get_running_loop()
        with push_client(cache_dir=cache_dir, delivery="application") as c:
            old = c._watch_event_fd(loop)
            t = threading.Thread(target=c._unwatch_event_fd, args=(old,))
            t.start()
            t.join()  # the removal is scheduled on this loop, not run yet
            new = c._watch_event_fd(loop)
            await asyncio.sleep(0.05)  # the scheduled removal's turn
            watched = has_reader(loop, c.event_fd)
            c._unwatch_event_fd(new)
            return watched, has_reader(loop, c.event_fd)

    watched, after = asyncio.run(asyncio.wait_for(run(), 30))
    assert watched, "the scheduled removal took the new reader"
    assert not after


def test_an_aupdates_that_raises_as_it_begins_leaves_no_inbox_behind(cache_dir):
    """aupdates() registered its inbox, then watched the event fd, which raises a callback's
    saved exception: the exception went out, the inbox stayed registered, and every later
    update went into it, read by nobody and unbounded, instead of to updates()."""
    raised = []

    def boom(update):
        if not raised:  # the first context's error only
            raised.append(update)
            raise RuntimeError("from on_error")

    async def run():
        c = sc.Client("grpc://127.0.0.1:1", app_id="a", audio=sc.PushAudio(), device_id=DEVICE_ID,
                      cache_dir=cache_dir, delivery="application", on_error=boom)
        try:
            c.start()
            for _ in range(500):  # until the error callback has run, its exception saved
                try:
                    c.dispatch()
                except RuntimeError:
                    pass
                if c._callback_error is not None:
                    break
                await asyncio.sleep(0.01)
            assert c._callback_error is not None
            with pytest.raises(RuntimeError, match="from on_error"):
                async for _ in c.aupdates(timeout=10):
                    pass
            assert not c._async_sinks
            c.start()  # a second context: its updates reach updates()
            return without_states(c.updates(timeout=20))
        finally:
            c.close()

    updates = asyncio.run(asyncio.wait_for(run(), 60))
    assert [type(u) for u in updates][-2:] == [sc.ErrorEvent, sc.StopEvent], updates


def test_a_stream_awaited_by_two_tasks_at_once_refuses_the_second(silent_server, cache_dir):
    """Two tasks awaiting one Stream's next update: the inbox has one waiter, so the second
    replaced the first, which never woke (a hang, with updates waiting). The second is refused,
    as an async generator refuses it, and the first goes on."""
    async def run():
        loop = asyncio.get_running_loop()
        with silent_push_client(silent_server, cache_dir) as c:
            st = c.stream(timeout=20)
            got = [await st.__anext__()]  # CONNECTING: the context is starting, and stays so
            waiting = asyncio.ensure_future(st.__anext__())
            for _ in range(5):  # the task runs to its wait for the next update
                await asyncio.sleep(0)
            assert has_reader(loop, c.event_fd) and not waiting.done()
            with pytest.raises(sc.InvalidStateError, match="another task is already awaiting"):
                await asyncio.wait_for(st.__anext__(), 2)
            assert not waiting.done()
            await reset_until_idle(silent_server, c)
            got.append(await waiting)  # the first task's stream still works
            async for u in st:
                got.append(u)
            return got

    got = asyncio.run(asyncio.wait_for(run(), 60))
    assert [type(u) for u in without_states(got)] == [sc.ErrorEvent, sc.StopEvent], got


@needs_state_and_delivery
def test_a_stream_left_beside_an_aupdates_does_not_queue_its_updates_twice(silent_server, cache_dir):
    """With an aupdates() running, a stream()'s updates go to both. The stream left with updates
    unread put them in the shared queue although the aupdates() had them already: a later
    updates() got that context's error and stop a second time."""
    async def run():
        with silent_push_client(silent_server, cache_dir) as c:
            got = []

            async def consume():
                async for u in c.aupdates(timeout=20):
                    got.append(u)
                    if isinstance(u, sc.StopEvent):
                        return
            consumer = asyncio.ensure_future(consume())
            await until(lambda: c._async_sinks)  # registered before the stream begins
            st = c.stream(timeout=20)
            await st.__anext__()  # CONNECTING
            assert silent_server.wait_for_connection()
            silent_server.close_all()  # the error and the stop, into both inboxes
            await asyncio.wait_for(consumer, 20)
            await st.aclose()  # left with them unread
            return got, list(c._queue), c._abandoned

    got, queued, abandoned = asyncio.run(asyncio.wait_for(run(), 60))
    assert [type(u) for u in without_states(got)] == [sc.ErrorEvent, sc.StopEvent], got
    assert without_states(queued) == [], queued
    # Its StopEvent came (the aupdates() had it too): the stream was not left early, and no
    # StopEvent is owed by it (counted, a later stream's own stop was taken for it, or its
    # stray stop ended a later context).
    assert abandoned == 0


def test_an_aupdates_ended_by_a_close_from_another_thread_yields_the_last_updates(cache_dir):
    """close() from another thread between the iterator's look at its empty inbox and its look
    at the handle: the callbacks the close waited for put their updates in the inbox, and the
    iterator, finding the handle gone, ended without them (they went to the shared queue)."""
    entered, release = threading.Event(), threading.Event()

    def slow_error(update):  # runs before its update is handed on
        entered.set()
        release.wait(10)

    async def run():
        c = push_client(cache_dir=cache_dir, on_error=slow_error)
        take, closers = c._take, []

        def take_then_close(inbox):
            item = take(inbox)
            if item is None and not closers:
                assert entered.wait(10)  # the error callback is running, its update not handed on
                closers.append(threading.Thread(target=c.close))
                closers[0].start()
                release.set()
                closers[0].join(10)  # closed: the error's update is in the inbox now
                assert c.closed
            return item
        c._take = take_then_close
        c.start()
        try:
            return [u async for u in c.aupdates(timeout=10)]
        finally:
            release.set()
            c.close()

    seen = asyncio.run(asyncio.wait_for(run(), 30))
    assert sc.ErrorEvent in [type(u) for u in seen], seen


@needs_state_and_delivery
def test_a_reader_removal_scheduled_from_another_thread_runs_before_close_frees_the_fd(cache_dir):
    """A Stream finished on another thread removes its loop's reader through that loop
    (call_soon_threadsafe). close() freed the client without waiting for it: the event fd was
    closed with the removal still to run, and once a new descriptor took the number, the late
    removal unwatched that one. close() now waits for the removal first."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever)
    runner.start()
    order = []
    try:
        c = push_client(cache_dir=cache_dir, delivery="application")
        remove_reader = loop.remove_reader
        loop.remove_reader = lambda fd: (order.append("removed"), remove_reader(fd))[1]

        async def watch():
            return c._watch_event_fd(asyncio.get_running_loop())
        reader = asyncio.run_coroutine_threadsafe(watch(), loop).result(10)
        gate = threading.Event()
        loop.call_soon_threadsafe(gate.wait, 10)  # the loop is busy for a while
        c._unwatch_event_fd(reader)  # from this thread: scheduled on the loop's
        free = _native.spc_client_free

        def recording_free(handle):
            order.append("freed")
            return free(handle)
        _native.spc_client_free = recording_free
        try:
            closer = threading.Thread(target=c.close)
            closer.start()
            time.sleep(0.2)  # an old close() frees meanwhile
            gate.set()
            closer.join(10)
        finally:
            _native.spc_client_free = free
        assert c.closed
    finally:
        gate_set = locals().get("gate")
        if gate_set is not None:
            gate_set.set()
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()
    assert order == ["removed", "freed"], order


@needs_state_and_delivery
def test_close_on_a_loop_with_a_reader_removal_pending_on_it_does_it_at_once(cache_dir):
    """A reader removal scheduled on a loop from another thread (a Stream finished there), then
    close() from a coroutine on that loop: close() waited for the removal, which could not run
    while the loop was blocked in that wait (1 s), and it ran after the fd was freed. It is done
    inline now."""
    async def run():
        loop = asyncio.get_running_loop()
        c = push_client(cache_dir=cache_dir, delivery="application")
        reader = c._watch_event_fd(loop)
        fd = c.event_fd
        t = threading.Thread(target=c._unwatch_event_fd, args=(reader,))
        t.start()
        t.join(10)  # scheduled on this loop, not run yet (this coroutine holds it)
        began = time.monotonic()
        c.close()
        took = time.monotonic() - began
        return took, has_reader(loop, fd)

    took, watched = asyncio.run(asyncio.wait_for(run(), 30))
    assert took < 0.5, f"close() waited {took:.2f} s for a removal this loop could not run"
    assert not watched


def test_updates_from_inside_a_callback_is_refused(cache_dir):
    """updates() iterated inside a callback waited for updates only that blocked callback thread
    could deliver: a hang, and close() from another thread then waited for that callback."""
    raised = []
    done = threading.Event()

    def on_start_or_error(update):
        try:
            next(c.updates(timeout=5))
        except BaseException as e:
            raised.append(e)
        done.set()

    c = push_client(cache_dir=cache_dir, on_error=on_start_or_error)
    try:
        c.start()  # the closed port: an error callback at once
        assert done.wait(10), "updates() inside the callback did not return"
    finally:
        c.close()
    assert raised and isinstance(raised[0], sc.InvalidStateError), raised


def test_a_client_collected_while_the_clients_lock_is_held_does_not_deadlock(cache_dir):
    """The cyclic garbage collector can run while a thread holds the binding's lock on its
    clients (an allocation inside it); a client in a reference cycle it collects closes itself,
    which takes that lock again: with a plain lock, the thread deadlocked on itself."""
    from speechclient import _handle

    class Holder:
        def __init__(self):
            self.c = push_client(cache_dir=cache_dir, on_segment=self.on_segment)  # a cycle

        def on_segment(self, update):
            pass

    finished = threading.Event()

    def run():
        gc.disable()
        try:
            Holder()  # unreachable at once, held by its cycle until a collection
            with _handle._clients_lock:
                gc.collect()
        finally:
            gc.enable()
            finished.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert finished.wait(10), "the collection deadlocked on the clients' lock"


def test_an_iterator_that_stops_reading_keeps_a_bounded_inbox(cache_dir):
    """An aupdates() whose task stops reading (awaiting something else) while the client goes on:
    its inbox grew without bound. It keeps the newest MAX_BUFFERED_UPDATES, as the shared
    queue does."""
    async def run():
        c = push_client(cache_dir=cache_dir)
        try:
            waiting = asyncio.ensure_future(c.aupdates(timeout=10).__anext__())
            await until(lambda: c._async_sinks)
            inbox = c._async_sinks[0][1]
            # As the callback thread hands them on, with the iterator's task not running meanwhile.
            for i in range(MAX_BUFFERED_UPDATES + 100):
                c._emit(sc.LevelEvent(-20.0, i), "level")
            held = len(inbox.items), inbox.items[-1]
            waiting.cancel()
            return held
        finally:
            c.close()

    held, newest = asyncio.run(asyncio.wait_for(run(), 60))
    assert held == MAX_BUFFERED_UPDATES
    assert newest == sc.LevelEvent(-20.0, MAX_BUFFERED_UPDATES + 99)


@needs_state_and_delivery
def test_updates_after_the_streams_stop_are_not_lost(silent_server, cache_dir):
    """A start queued from the loop body: its events come after the stream's stop, often in the
    same dispatch; they must reach updates()."""
    async def run():
        with silent_push_client(silent_server, cache_dir) as c:
            seen = []
            async for u in c.stream(timeout=20):
                seen.append(u)
                if len(seen) == 1:
                    c.stop()
                    c.start()  # queued behind the stop
                    assert silent_server.wait_for_connection()
                    silent_server.close_all()
            assert silent_server.wait_for_connection()  # the queued start is connecting
            after = next(iter(c.updates(timeout=5)))
            await reset_until_idle(silent_server, c)
            return seen, after

    seen, after = asyncio.run(asyncio.wait_for(run(), 30))
    assert [type(u) for u in without_states(seen)] == [sc.ErrorEvent, sc.StopEvent]
    assert after == sc.StateEvent(sc.ConnectionState.CONNECTING, 0, 0, None)


@needs_state_and_delivery
def test_cancelling_a_stream_removes_the_reader_and_stops_the_context(silent_server, cache_dir):
    async def run():
        loop = asyncio.get_running_loop()
        with silent_push_client(silent_server, cache_dir) as c:
            seen = []

            async def consume():
                async for u in c.stream():
                    seen.append(u)

            task = asyncio.ensure_future(consume())
            await until(lambda: seen)
            assert has_reader(loop, c.event_fd)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not has_reader(loop, c.event_fd)
            assert c.state == sc.State.STOPPING
            await reset_until_idle(silent_server, c)

    asyncio.run(asyncio.wait_for(run(), 30))


@needs_state_and_delivery
def test_stream_timeout_and_one_stream_at_a_time(silent_server, cache_dir):
    async def run():
        loop = asyncio.get_running_loop()
        with silent_push_client(silent_server, cache_dir) as c:
            async with c.stream(timeout=0.3) as s:
                assert await s.__anext__() == sc.StateEvent(sc.ConnectionState.CONNECTING, 0, 0, None)
                with pytest.raises(sc.InvalidStateError, match="another stream"):
                    await c.stream().__anext__()
                assert has_reader(loop, c.event_fd)  # the refused one left the running one alone
                t0 = time.monotonic()
                with pytest.raises(sc.SpeechTimeoutError, match="stream"):
                    await s.__anext__()
                assert 0.25 <= time.monotonic() - t0 < 5
                assert not has_reader(loop, c.event_fd)
                with pytest.raises(StopAsyncIteration):
                    await s.__anext__()
            await reset_until_idle(silent_server, c)
            async with c.stream() as s:  # leaving the block ends it
                await s.__anext__()
            assert not has_reader(loop, c.event_fd)
            await s.aclose()  # idempotent
            await reset_until_idle(silent_server, c)

    asyncio.run(asyncio.wait_for(run(), 30))


@needs_state_and_delivery
def test_a_stream_whose_start_is_refused_leaves_nothing_behind(silent_server, cache_dir):
    async def run():
        loop = asyncio.get_running_loop()
        with silent_push_client(silent_server, cache_dir) as c:
            c.start()  # a context the stream does not own: its start() is refused
            with pytest.raises(sc.InvalidStateError, match="start"):
                async for _ in c.stream():
                    pass
            assert not has_reader(loop, c.event_fd)
            assert c.state == sc.State.STARTING  # the other context was left alone
            await reset_until_idle(silent_server, c)
            async for u in c.stream(timeout=20):  # and the slot was released
                assert u == sc.StateEvent(sc.ConnectionState.CONNECTING, 0, 0, None)
                break
            await reset_until_idle(silent_server, c)

    asyncio.run(asyncio.wait_for(run(), 30))


@needs_state_and_delivery
def test_stream_reraises_a_callback_exception(silent_wav, cache_dir):
    def boom(update):
        raise RuntimeError("from on_error")

    async def run():
        with file_client(silent_wav, cache_dir, delivery="application", on_error=boom) as c:
            with pytest.raises(RuntimeError, match="from on_error"):
                async for _ in c.stream(timeout=20):
                    pass
            assert not has_reader(asyncio.get_running_loop(), c.event_fd)

    asyncio.run(asyncio.wait_for(run(), 30))


@needs_state_and_delivery
def test_close_inside_a_stream_ends_it(silent_server, cache_dir):
    async def run():
        loop = asyncio.get_running_loop()
        c = silent_push_client(silent_server, cache_dir)
        fd = c.event_fd
        seen = []
        async for u in c.stream(timeout=20):
            seen.append(u)
            c.close()  # abandons the context: the iterator ends without a StopEvent
        assert not has_reader(loop, fd)
        return seen

    seen = asyncio.run(asyncio.wait_for(run(), 30))
    assert seen and not any(isinstance(u, sc.StopEvent) for u in seen)


# -- states ------------------------------------------------------------------------------------

def test_calls_in_the_wrong_state_raise_invalid_state():
    with push_client() as c:
        with pytest.raises(sc.InvalidStateError, match="IDLE"):
            c.stop()
        with pytest.raises(sc.InvalidStateError):
            c.resume()
        with pytest.raises(sc.InvalidStateError):
            c.push_end()
        c.suspend()
        assert c.state == sc.State.SUSPENDED
        with pytest.raises(sc.InvalidStateError, match="SUSPENDED"):
            c.start()
        with pytest.raises(sc.InvalidStateError):
            c.suspend()
        c.resume()
        assert c.state == sc.State.IDLE


def test_push_to_a_client_that_is_not_push_audio_is_invalid_state(silent_wav, cache_dir):
    with file_client(silent_wav, cache_dir) as c:
        with pytest.raises(sc.InvalidStateError, match="WavFile"):
            c.push(b"\0\0")
        with pytest.raises(sc.InvalidStateError):
            c.push_end()


def test_close_is_idempotent_and_calls_after_close_raise_invalid_state():
    c = push_client()
    c.close()
    c.close()
    assert c.closed
    for call in (c.start, c.stop, c.suspend, c.resume, c.push_end, lambda: c.push(b""), lambda: c.state,
                 c.wait_idle, c.dispatch):
        with pytest.raises(sc.InvalidStateError, match="closed"):
            call()
    assert list(c.updates(timeout=1)) == []


def test_context_manager_closes_also_on_an_exception():
    with push_client() as c:
        assert not c.closed
    assert c.closed
    with pytest.raises(KeyError):
        with push_client() as d:
            raise KeyError("boom")
    assert d.closed


def test_close_from_another_thread_ends_a_waiting_iterator(silent_wav, cache_dir):
    c = push_client()
    c.start()  # fails at once; the iterator then waits (no stop is needed to end it: close is)
    threading.Timer(0.5, c.close).start()
    t0 = time.monotonic()
    updates = []
    for u in c.updates(timeout=20):
        updates.append(u)
        if isinstance(u, sc.StopEvent):
            break
    for u in c.updates(timeout=20):  # no stop will come: only close() ends this one
        updates.append(u)
    assert c.closed and time.monotonic() - t0 < 10


# -- push --------------------------------------------------------------------------------------

def test_push_takes_every_buffer_type():
    with push_client() as c:
        c.start()  # pushed during a context, too (dropped once it failed)
        for samples in (b"\0\1" * 160, bytearray(320), memoryview(bytearray(320)), memoryview(b"\0" * 640)[::2],
                        memoryview(b"\0" * 320)[2:], array.array("h", range(160)), b"", array.array("h")):
            c.push(samples)
        assert c.wait_idle(20)
        for samples in (b"\0\1" * 160, bytearray(320), array.array("h", [1] * 160)):
            c.push(samples)  # outside a context: dropped, not an error


def test_push_releases_the_callers_buffer():
    with push_client() as c:
        b = bytearray(320)
        c.push(b)
        b.extend(b"\0\0")  # would raise BufferError if the binding still held an export
        a = array.array("h", [0] * 10)
        c.push(a)
        a.append(1)


@pytest.mark.parametrize("samples, text", [
    (array.array("i", [0, 0]), "format 'i'"),
    (array.array("f", [0.0]), "format 'f'"),
    ([0, 0], "list"),
    ("\0\0", "str"),
])
def test_push_rejects_what_is_not_16_bit_samples(samples, text):
    with push_client() as c:
        with pytest.raises(sc.InvalidArgumentError, match=text):
            c.push(samples)


def test_push_keeps_a_partial_frame_for_the_next_push():
    """Issue 19 item 7: an odd byte or half a stereo pair (as a pipe hands them out) was an
    error; it now waits for the next push, and push_end() drops what is left."""
    with push_client(48000, 2) as c:
        c.push(array.array("h", [0] * 20))
        c.push(array.array("h", [0] * 21))     # 10 frames and one sample kept
        assert c._push_rest == b"\0\0"
        c.push(b"\0\0\0")                       # the kept sample + 3 bytes: one frame, one byte kept
        assert c._push_rest == b"\0"
        with pytest.raises(sc.InvalidStateError):
            c.push_end()                         # no context here; what was kept is dropped all the same
        assert c._push_rest == b""


def test_a_partial_frame_is_dropped_when_a_context_ends_or_begins():
    """A partial frame kept from the last push was carried across stop() and start() (push_end()
    alone dropped it): every sample of the next context shifted by a byte, noise for the
    recognizer, or a stereo pair's channels swapped."""
    with push_client(16000, 2) as c:
        for end in (c.stop, c.start, c.suspend, c.push_end):
            c.push(b"\0\0\0")
            assert c._push_rest == b"\0\0\0"
            try:
                end()
            except sc.SpeechClientError:
                pass  # no context on this client: the partial frame goes all the same
            assert c._push_rest == b"", end.__name__
            if end == c.suspend:
                c.resume()


def test_a_push_refused_keeps_the_partial_frame_and_one_taken_does_not_restore_it(monkeypatch):
    """Nothing of a refused push is taken: the carried bytes stay as before it. A push that was
    taken keeps its own leftover even when an exception (a Ctrl-C's KeyboardInterrupt) lands
    right after the library returned: restoring the older bytes then sent them twice."""
    with push_client() as c:
        c.push(b"\1")
        monkeypatch.setattr(c, "_push_status", lambda data, frames: sc.Status.TIMEOUT)
        with pytest.raises(sc.SpeechTimeoutError):
            c.push(b"\2\3\4")
        assert c._push_rest == b"\1"

        def interrupted(status):
            raise KeyboardInterrupt  # as a signal handler run right after the call returned
        monkeypatch.setattr(c, "_push_status", lambda data, frames: sc.Status.OK)
        monkeypatch.setattr(c, "_raise_push", interrupted)
        with pytest.raises(KeyboardInterrupt):
            c.push(b"\2\3\4\5")  # b"\1\2\3\4" sent, b"\5" kept
        assert c._push_rest == b"\5"


@pytest.mark.parametrize("audio, named", [
    (lambda: sc.WavFile(b"/tmp/caf\xe9.wav"), r"not UTF-8 \(byte 0xe9"),
    (lambda: sc.WavFile(os.fsdecode(b"/tmp/caf\xe9.wav")), r"not UTF-8 \(byte 0xe9"),
    (lambda: sc.WavFile("/tmp/\ud800.wav"), "not a valid path"),
])
def test_a_path_the_library_cannot_take_is_a_named_error(audio, named):
    """The library takes UTF-8 names only: a Latin-1 file name reached it as a bare "invalid
    argument", and a lone surrogate raised a bare UnicodeEncodeError (the CLI's traceback)."""
    with pytest.raises(sc.InvalidArgumentError, match=named) as e:
        sc.Client(UNREACHABLE, app_id="py", audio=audio(), device_id=DEVICE_ID)
    assert e.value.option == "audio"
    with pytest.raises(sc.InvalidArgumentError, match="not valid Unicode text") as e:
        sc.Client(UNREACHABLE, app_id="py\ud800", audio=sc.PushAudio(), device_id=DEVICE_ID)
    assert e.value.option == "app_id"


def test_shared_delivery_by_name():
    """delivery="shared" (the library's 0.10 shared callback threads) was refused by name; only
    the enum member reached it."""
    with push_client(delivery="shared") as c:
        assert c.delivery == sc.Delivery.SHARED
        c.start()
        assert c.wait_idle(20)
    with pytest.raises(sc.InvalidArgumentError, match="'thread', 'shared' or 'application'"):
        push_client(delivery="pool")


def test_push_takes_numpy_int16_arrays():
    import numpy as np  # installed by scripts/setup-debian.sh
    with push_client(16000, 2) as c:
        c.push(np.zeros((160, 2), dtype=np.int16))          # frames x channels, no copy
        c.push(np.zeros(320, dtype="<i2"))                   # explicit little-endian
        c.push(np.zeros((320, 2), dtype=np.int16)[::2])      # strided: one copy
        ro = np.zeros(320, dtype=np.int16)
        ro.flags.writeable = False
        c.push(ro)                                           # read-only: one copy
        with pytest.raises(sc.InvalidArgumentError, match="format"):
            c.push(np.zeros(320, dtype=np.float32))
        with pytest.raises(sc.InvalidArgumentError, match="format"):
            c.push(np.zeros(320, dtype=">i2"))


# -- callbacks ---------------------------------------------------------------------------------

def test_a_raising_callback_does_not_crash_and_the_next_call_reraises_it(silent_wav, cache_dir):
    def boom(update):
        raise RuntimeError("from on_error")
    c = file_client(silent_wav, cache_dir, on_error=boom)
    c.start()
    with pytest.raises(RuntimeError, match="from on_error"):
        c.wait_idle(20)  # it waited for the callback, then re-raised its exception
    assert c.wait_idle(20) is True  # raised once
    assert c.state == sc.State.IDLE
    c.start()
    with pytest.raises(RuntimeError, match="from on_error"):
        list(c.updates(timeout=20))
    c.close()


def test_close_reraises_a_pending_callback_exception_after_freeing(silent_wav, cache_dir):
    def boom(update):
        raise ValueError("from on_stop")
    c = file_client(silent_wav, cache_dir, on_stop=boom)
    c.start()
    deadline = time.monotonic() + 20
    while c._callback_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(ValueError, match="from on_stop"):
        c.close()
    assert c.closed


@needs_state_and_delivery
def test_the_event_loops_reader_leaves_a_callback_exception_to_the_iterator(silent_wav, cache_dir):
    """With application delivery the event loop's reader (loop.add_reader) runs the callbacks
    while the consumer awaits something else. An exception a callback raised must reach the
    iterator (or the next call). The reader's next dispatch re-raised it, so taking it, into
    asyncio's exception handler, which only logs: the iteration went on as if all was well."""
    with file_client(silent_wav, cache_dir, delivery="application") as c:
        c._remember(ValueError("from a callback"))  # as the trampoline saves it
        c._dispatch_quietly()  # what the loop runs when the event fd is readable
        with pytest.raises(ValueError, match="from a callback"):
            c.dispatch()


def test_ctrl_c_during_close_leaves_the_client_closed(silent_wav, cache_dir):
    """Ctrl-C while close() waits for a slow callback is raised as the free returns; the client
    is closed then, and a second close() (or the interpreter's exit) returns at once. It was
    left half-closed, and both waited for ever."""
    import _thread
    in_callback = threading.Event()

    def slow(update):
        in_callback.set()
        time.sleep(1.0)

    c = file_client(silent_wav, cache_dir, on_error=slow)
    c.start()
    assert in_callback.wait(20)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        c.close()
        time.sleep(5)  # not reached when the interrupt lands in close(), as it should
    timer.join()
    assert c.closed
    again = threading.Thread(target=c.close, daemon=True)
    again.start()
    again.join(3)
    assert not again.is_alive()


def test_aupdates_reraises_a_callback_exception(silent_wav, cache_dir):
    def boom(update):
        raise RuntimeError("from on_stop")

    async def run():
        with file_client(silent_wav, cache_dir, on_stop=boom) as c:
            c.start()
            with pytest.raises(RuntimeError, match="from on_stop"):
                async for _ in c.aupdates(timeout=20):
                    pass
    asyncio.run(asyncio.wait_for(run(), 30))


def test_start_from_a_stop_callback_runs_a_second_context(silent_wav, cache_dir):
    calls = []

    def restart_once(event):
        if not calls:
            calls.append("start")
            client.start()  # a second context: it fails the same way

    client = file_client(silent_wav, cache_dir, on_stop=restart_once)
    client.start()
    updates = without_states(client.updates(timeout=20))
    assert [type(u) for u in updates] == [sc.ErrorEvent, sc.StopEvent] * 2
    assert client.wait_idle(20) and client.state == sc.State.IDLE

    client.close()


def test_start_and_stop_from_inside_a_callback(silent_server, cache_dir):
    """A server that accepts connections and never answers keeps a started client STARTING, so
    the stop right after the start in the stop callback is certain to have a context to stop
    (or, if the stop callback runs while STOPPING, a queued start to cancel): both must succeed.
    Resetting the connections ends each context."""
    calls = []

    def on_stop(event):
        if not calls:
            client.start()
            calls.append(client.state)
            client.stop()
            calls.append(client.state)

    client = sc.Client(silent_server.url, app_id="a", audio=sc.PushAudio(), device_id=DEVICE_ID,
                       cache_dir=cache_dir, on_stop=on_stop)
    client.start()
    assert silent_server.wait_for_connection()
    for _ in range(100):
        silent_server.close_all()
        if client.wait_idle(0.2):  # re-raises here if start() or stop() raised in the callback
            break
    assert len(calls) == 2, calls
    assert calls[0] in (sc.State.STARTING, sc.State.STOPPING)
    assert calls[1] in (sc.State.STOPPING, sc.State.IDLE)
    assert client.state == sc.State.IDLE
    client.close()


def test_close_and_wait_idle_from_inside_a_callback_raise_invalid_state(silent_wav, cache_dir):
    seen = {}

    def on_stop(event):
        for name, call in (("close", client.close), ("wait_idle", client.wait_idle)):
            try:
                call()
            except sc.InvalidStateError as e:
                seen[name] = e
        seen["state"] = client.state  # an ordinary call still works there

    client = file_client(silent_wav, cache_dir, on_stop=on_stop)
    client.start()
    assert_unreachable_run(client.updates(timeout=20))
    assert client.wait_idle(20)
    assert set(seen) == {"close", "wait_idle", "state"}
    assert "inside" in str(seen["close"])
    assert not client.closed  # the refused close freed nothing
    client.start()
    assert_unreachable_run(client.updates(timeout=20))
    client.close()
    assert client.closed


def test_updates_are_copies_that_outlive_their_callback():
    seg = sc.Segment("ctx", 0, True, "hello", (sc.Word("hello", 0, 0, 100, True),), sc.Intent("greet", True),
                     (sc.Entity("name", "x", 0, 1, True),))
    assert seg == sc.Segment("ctx", 0, True, "hello", (sc.Word("hello", 0, 0, 100, True),), sc.Intent("greet", True),
                             (sc.Entity("name", "x", 0, 1, True),), json="{}")  # json is not compared
    with pytest.raises(AttributeError):
        seg.transcript = "changed"  # frozen


# -- lifetime ----------------------------------------------------------------------------------

def _threads_of_this_process():
    return len(os.listdir("/proc/self/task"))


def test_200_clients_created_and_closed(silent_wav, cache_dir):
    before = _threads_of_this_process()
    for i in range(200):
        if i % 20 == 0:
            c = file_client(silent_wav, cache_dir)
            c.start()  # closed in the middle of its context
        else:
            c = push_client()
        c.close()
    gc.collect()
    # The library joins its per-client threads in spc_client_free (a process-wide one may stay).
    assert _threads_of_this_process() <= before + 2


def test_a_client_dropped_without_close_is_closed(silent_wav, cache_dir):
    c = file_client(silent_wav, cache_dir)
    c.start()
    del c
    gc.collect()


def test_a_client_whose_last_reference_dies_in_its_own_callback(silent_wav, cache_dir):
    """It is collected on the library's callback thread, where spc_client_free is refused: the
    binding frees it from another thread instead, without a crash or a hang."""
    holder = []
    done = threading.Event()

    def on_stop(event):
        holder.clear()
        done.set()

    holder.append(file_client(silent_wav, cache_dir, on_stop=on_stop))
    holder[0].start()
    assert done.wait(20)
    deadline = time.monotonic() + 10
    while any(t.name == "speechclient-free" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(t.name == "speechclient-free" for t in threading.enumerate())


# -- command line ------------------------------------------------------------------------------

def _cli(*args, timeout=60):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "bindings" / "python"))
    return subprocess.run([sys.executable, "-m", "speechclient", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_cli_json_lines_for_an_unreachable_server(silent_wav, cache_dir):
    r = _cli("--url", UNREACHABLE, "--app-id", "py", "--file", str(silent_wav), "--cache-dir", cache_dir, "--json")
    assert r.returncode == 1
    assert r.stdout.splitlines() == [
        '{"type":"state","state":"connecting"}',
        '{"type":"state","state":"unavailable","message":"cannot connect to 127.0.0.1:1: connect failed: Connection refused"}',
        '{"type":"error","code":"network error","status":4,"grpc_status":14,'
        '"message":"cannot connect to 127.0.0.1:1: connect failed: Connection refused"}',
        '{"type":"stop","context_id":""}',
    ]


def test_cli_errors_and_usage(tmp_path):
    missing = tmp_path / "missing.wav"
    r = _cli("--url", UNREACHABLE, "--file", str(missing))
    assert r.returncode == 1 and str(missing) in r.stderr and "audio error" in r.stderr and r.stdout == ""
    # With --json a client that cannot be made is one error line, as in the C demo.
    r = _cli("--url", UNREACHABLE, "--file", str(missing), "--json")
    assert r.returncode == 1
    line, = r.stdout.splitlines()
    assert line.startswith('{"type":"error","code":"audio error","status":10,"grpc_status":-1,"message":"WAV file')
    # Values the library rejects are usage errors (2), as are missing or duplicate sources.
    r = _cli("--url", "ftp://x", "--file", str(missing))
    assert r.returncode == 2 and "url='ftp://x'" in r.stderr
    assert _cli("--url", UNREACHABLE, "--file", str(missing), "--chunk-ms", "5").returncode == 2
    assert _cli("--url", UNREACHABLE).returncode == 2
    assert _cli("--url", UNREACHABLE, "--file", "a.wav", "--mic").returncode == 2


def test_json_strings_are_escaped_like_the_c_demo():
    from speechclient.__main__ import json_string
    assert json_string('a"b\\c\nd\re\tf\x01g\u00e9\x7f') == '"a\\"b\\\\c\\nd\\re\\tf\\u0001g\u00e9\\u007f"'


# -- hands-free listening and levels (0.2) -----------------------------------------------------

needs_hands_free = pytest.mark.skipif(not _native.HAS_HANDS_FREE,
                                      reason="the library has no hands-free listening yet (0.2)")


def test_hands_free_enums_are_the_headers():
    assert {x.name: int(x) for x in sc.Activation} == {"MANUAL": 0, "VOICE": 1, "WAKEWORD": 2}
    assert {x.name: int(x) for x in sc.Listen} == {
        "SPEECH": 0, "SILENCE": 1, "ACTIVATE": 2, "DEACTIVATE": 3, "TIMEOUT": 4}
    assert {x.name: int(x) for x in sc.VadParam} == {
        "SNR_DB": 0, "NOISE_GATE_DB": 1, "NOISE_LEARN_HALFTIME_MS": 2, "WINDOW_FRAMES": 3, "ACTIVATION_RATIO": 4,
        "RELEASE_RATIO": 5, "HOLD_MS": 6}


def test_binding_version_is_the_headers():
    # VERSION is the one source (scripts/stamp-version.sh): the header and this binding carry it,
    # and the wheel takes its version from the binding.
    assert (ROOT / "VERSION").read_text().strip() == _native.SPC_VERSION_STRING == sc.__version__
    text = (ROOT / "include" / "speechclient.h").read_text()
    assert f'#define SPC_VERSION_STRING "{_native.SPC_VERSION_STRING}"' in text
    assert f"#define SPC_VERSION_NUMBER {_native.SPC_VERSION_NUMBER}" in text
    assert f"#define SPC_VERSION_MINOR {_native.SPC_VERSION_MINOR}" in text
    pyproject = (ROOT / "bindings" / "python" / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert 'version = { attr = "speechclient._native.SPC_VERSION_STRING" }' in pyproject


@needs_hands_free
@pytest.mark.parametrize("kwargs, text", [
    (dict(activation="sometimes"), "activation='sometimes'"),
    (dict(activation=7), "activation=7"),
    (dict(wakeword=""), "wakeword=''"),
    (dict(wakeword="one two three four five six seven eight nine"), "wakeword='one two"),
    (dict(wakeword=3), "wakeword=3"),
    (dict(vad={"snr_db": 61}), "vad['snr_db']=61"),
    (dict(vad={"noise_gate_db": 1}), "vad['noise_gate_db']=1"),
    (dict(vad={sc.VadParam.HOLD_MS: 10001}), "vad['hold_ms']=10001"),
    (dict(vad={"snr_db": float("nan")}), "vad['snr_db']=nan"),
    (dict(vad={"window_frames": 2.5}), "vad['window_frames']=2.5"),
    (dict(vad={"hold_ms": "300"}), "vad['hold_ms']='300'"),
    (dict(vad={"hold_ms": True}), "vad['hold_ms']=True"),
    (dict(vad={"loudness": 3}), "vad['loudness']"),
    (dict(vad={"release_ratio": 0.7}), "vad['release_ratio']=0.7"),  # not below the default 0.6
    (dict(vad=[("snr_db", 6)]), "vad=[('snr_db', 6)]"),
    (dict(endpointing=(300, 50, 500, 15000)), "endpointing=(300, 50, 500, 15000)"),
    (dict(endpointing=(300, 1000, 5000, 4000)), "endpointing=(300, 1000, 5000, 4000)"),
    (dict(endpointing=(300, 1000, 500)), "endpointing=(300, 1000, 500)"),
    (dict(endpointing=(-1, 1000, 500, 15000)), "endpointing=-1"),
])
def test_a_rejected_hands_free_option_names_it_and_its_value(kwargs, text):
    with pytest.raises(sc.InvalidArgumentError) as info:
        sc.Client(UNREACHABLE, app_id="a", audio=sc.PushAudio(), device_id=DEVICE_ID, **kwargs)
    assert text in str(info.value)
    assert info.value.code == sc.Status.INVALID_ARGUMENT
    assert info.value.option == next(iter(kwargs))


@needs_hands_free
def test_wakeword_activation_without_a_phrase_is_the_librarys_invalid_argument():
    status, message = _raw_client_new_message(server_url=UNREACHABLE.encode(), app_id=b"a",
                                              activation=int(sc.Activation.WAKEWORD))
    assert status == sc.Status.INVALID_ARGUMENT and message
    with pytest.raises(sc.InvalidArgumentError) as info:
        sc.Client(UNREACHABLE, app_id="a", audio=sc.PushAudio(), device_id=DEVICE_ID, activation="wakeword")
    assert info.value.message == message  # spc_client_new's own message, not one of the binding's
    assert info.value.option is None


@needs_hands_free
def test_every_hands_free_option_is_accepted():
    common = dict(url=UNREACHABLE, app_id="a", audio=sc.PushAudio(), device_id=DEVICE_ID)
    # activation_ratio 0.15 alone is refused while release_ratio is still its default 0.2: the
    # pair must be applied in the order that works.
    vad = {"snr_db": 6, "noise_gate_db": -60, "noise_learn_halftime_ms": 800, "window_frames": 8,
           "activation_ratio": 0.15, "release_ratio": 0.1, sc.VadParam.HOLD_MS: 250}
    with sc.Client(**common, activation="wakeword", wakeword="Hey, Computer", vad=vad,
                   endpointing=(0, 100, 0, 500), levels=True, on_listen=print, on_level=print) as c:
        assert c.activation == sc.Activation.WAKEWORD and c.state == sc.State.IDLE
    with sc.Client(**common, activation=sc.Activation.VOICE) as c:
        assert c.activation == sc.Activation.VOICE
    with sc.Client(**common, wakeword="hey computer") as c:  # a phrase alone means wakeword listening
        assert c.activation == sc.Activation.WAKEWORD
    with sc.Client(**common) as c:
        assert c.activation == sc.Activation.MANUAL


@needs_hands_free
def test_voice_listening_against_the_unreachable_server_ends_with_error_and_stop():
    listened = []
    with push_client(activation="voice", levels=True, on_listen=listened.append) as c:
        c.start()
        assert_unreachable_run(c.updates(timeout=20))
        assert c.wait_idle(5) and c.state == sc.State.IDLE
    assert listened == []  # never listening: the connection failed first


def test_listen_and_level_json_lines_are_the_c_demos():
    from speechclient.__main__ import event_json
    assert event_json(sc.ListenEvent(sc.Listen.ACTIVATE, 1080)) == \
        '{"type":"listen","event":"activate","position_ms":1080}'
    assert event_json(sc.ListenEvent(sc.Listen.TIMEOUT, 2**40)) == \
        f'{{"type":"listen","event":"timeout","position_ms":{2**40}}}'
    assert event_json(sc.ListenEvent(9, 5)) == '{"type":"listen","event":"unknown","position_ms":5}'
    # dbfs: printf("%.1f", (double)level_dbfs) in C; the same float32 values through libc here,
    # ties (-23.25, -0.25) and values that round to -0.0 included.
    libc = ctypes.CDLL(None)
    buf = ctypes.create_string_buffer(64)
    for value in (-23.25, -0.25, -0.04, -100.0, 0.0, -23.45, -7.05, -59.95, -31.149999):
        as_float = ctypes.c_float(value).value  # what the level callback receives
        libc.snprintf(buf, 64, b"%.1f", ctypes.c_double(as_float))
        assert event_json(sc.LevelEvent(as_float, 100)) == \
            f'{{"type":"level","dbfs":{buf.value.decode()},"position_ms":100}}', value


def test_listen_and_level_trampolines_make_frozen_updates():
    from speechclient import _handle
    got = []
    with push_client(on_listen=got.append, on_level=got.append) as c:
        listen_cb, level_cb = _handle._TRAMPOLINES[6:8]
        # Called as the library calls them, with the client's key as user_data.
        listen_cb(None, int(sc.Listen.DEACTIVATE), 3500, c._key)
        level_cb(None, -23.5, 200, c._key)
        listen_cb(None, 42, 7, c._key)  # an event newer than the binding: kept as its number
        assert got == [sc.ListenEvent(sc.Listen.DEACTIVATE, 3500), sc.LevelEvent(-23.5, 200), sc.ListenEvent(42, 7)]
        assert list(c._queue) == got  # the same updates, in order, for updates()/aupdates()
    with pytest.raises(Exception):
        got[0].position_ms = 1  # frozen like the other updates


def emit_listen_from_another_thread(c, position_ms):
    """A ListenEvent as the library's callback thread hands it over (the trampoline, off this thread)."""
    from speechclient import _handle
    listen_cb = _handle._TRAMPOLINES[6]
    t = threading.Thread(target=listen_cb, args=(None, int(sc.Listen.ACTIVATE), position_ms, c._key))
    t.start()
    t.join()


def test_updates_in_flight_when_aupdates_is_left_keep_their_order():
    """An update the callback thread handed over just before an aupdates() iterator was left, and
    one after, reach the shared queue in the order they happened. The first used to be in
    flight on the loop (call_soon_threadsafe) when the iterator ended, and landed behind the
    second."""
    with push_client() as c:
        async def run():
            it = c.aupdates()
            emit_listen_from_another_thread(c, 1)
            first = await it.__anext__()
            emit_listen_from_another_thread(c, 2)  # before the loop runs again
            await it.aclose()  # the iterator ends without the loop running in between
            emit_listen_from_another_thread(c, 3)  # no iterator: straight to the shared queue
            await asyncio.sleep(0.05)  # whatever the loop still had to run
            return first
        first = asyncio.run(asyncio.wait_for(run(), 10))
        assert first.position_ms == 1
        assert [u.position_ms for u in c._queue] == [2, 3]


def test_updates_for_an_aupdates_iterator_on_a_closed_loop_are_not_lost():
    """An aupdates() iterator left suspended on a loop that was then closed (never finalised)
    can never take another update: what arrives goes to the shared queue for updates(). It went
    into that iterator's queue, where nothing could read it."""
    with push_client() as c:
        loop = asyncio.new_event_loop()
        it = c.aupdates()
        emit_listen_from_another_thread(c, 1)
        assert loop.run_until_complete(it.__anext__()).position_ms == 1
        loop.close()
        emit_listen_from_another_thread(c, 2)
        emit_listen_from_another_thread(c, 3)
        assert [u.position_ms for u in c._queue] == [2, 3]


async def an_aupdates_left_with_one_unread(c):
    """Updates 1 and 2; an aupdates() iterator takes 1 and is left, not closed: as after `break`
    until asyncio closes it, later, as a task. Returns it (close it to finish it)."""
    emit_listen_from_another_thread(c, 1)
    emit_listen_from_another_thread(c, 2)
    first = c.aupdates()
    assert (await first.__anext__()).position_ms == 1
    return first


def test_a_new_aupdates_takes_over_from_one_left_but_not_finalised():
    """`break` out of an aupdates() loop, then a new one at once. The first stayed registered
    until closed: it took a copy of every update, and what it had not read (the StopEvent, say)
    went to the shared queue, never to the new iterator, which then waited for it."""
    with push_client() as c:
        async def run():
            first = await an_aupdates_left_with_one_unread(c)
            second = c.aupdates()
            emit_listen_from_another_thread(c, 3)
            got = [(await second.__anext__()).position_ms, (await second.__anext__()).position_ms]
            await first.aclose()  # its clean-up, as asyncio's task runs it
            await second.aclose()
            return got
        assert asyncio.run(asyncio.wait_for(run(), 10)) == [2, 3]
        assert list(c._queue) == []  # nothing twice


def test_updates_takes_over_from_an_aupdates_left_but_not_finalised():
    """updates() right after `break` out of aupdates(), before asyncio closed that iterator: it
    kept taking the updates, and updates() saw none of them."""
    with push_client() as c:
        async def run():
            first = await an_aupdates_left_with_one_unread(c)
            emit_listen_from_another_thread(c, 3)
            sync = c.updates(timeout=5)
            got = [next(sync).position_ms, next(sync).position_ms]
            await first.aclose()
            return got
        assert asyncio.run(asyncio.wait_for(run(), 10)) == [2, 3]


def test_an_aupdates_still_iterated_after_a_takeover_says_so():
    """Two consumers at once is against the rule: the one taken over raises, rather than end as
    if its updates were over."""
    with push_client() as c:
        async def run():
            first = c.aupdates()
            emit_listen_from_another_thread(c, 1)
            await first.__anext__()
            second = c.aupdates()
            emit_listen_from_another_thread(c, 2)
            assert (await second.__anext__()).position_ms == 2
            with pytest.raises(sc.InvalidStateError, match="took over"):
                await first.__anext__()
            await second.aclose()
        asyncio.run(asyncio.wait_for(run(), 10))


def test_a_wake_before_the_wait_is_kept_for_it():
    """The idle event can be dispatched inside an iterator's own check for the end (application
    delivery), before it waits: that wake must end the wait that follows. Lost, the wait slept
    until its timeout (a CI run: stream() of a hands-free listening, 30 s)."""
    from speechclient._aio import _Inbox

    async def run():
        inbox = _Inbox(asyncio.get_running_loop())
        inbox.wake()
        await asyncio.wait_for(inbox.wait(None), 2)  # at once
        with pytest.raises(asyncio.TimeoutError):  # taken: the next wait waits
            await asyncio.wait_for(inbox.wait(None), 0.05)
    asyncio.run(run())


def test_application_delivery_on_a_closed_loops_thread_loses_nothing():
    """Application delivery: the callbacks run in dispatch() on the thread whose loop, with an
    aupdates() iterator suspended on it, was closed. The update went into that dead iterator."""
    with push_client(delivery="application") as c:
        loop = asyncio.new_event_loop()
        it = c.aupdates()
        from speechclient import _handle
        listen_cb = _handle._TRAMPOLINES[6]
        listen_cb(None, int(sc.Listen.ACTIVATE), 1, c._key)  # before the iterator: shared queue
        assert loop.run_until_complete(it.__anext__()).position_ms == 1
        loop.close()
        listen_cb(None, int(sc.Listen.ACTIVATE), 2, c._key)  # on this thread, as dispatch() runs it
        assert [u.position_ms for u in c._queue] == [2]


def test_an_iterators_leftovers_keep_the_newest_when_they_overfill_the_queue():
    """An aupdates() iterator left with more unread updates than the shared queue holds: the
    oldest go, as on append. extendleft dropped the newest instead (the StopEvent last)."""
    from speechclient import client as client_module, _handle
    bound = client_module.MAX_BUFFERED_UPDATES
    listen_cb = _handle._TRAMPOLINES[6]
    with push_client() as c:
        async def run():
            it = c.aupdates()
            emit_listen_from_another_thread(c, 0)
            await it.__anext__()
            for k in range(1, bound + 2):  # into its inbox, unread
                listen_cb(None, int(sc.Listen.ACTIVATE), k, c._key)
            await it.aclose()
        asyncio.run(asyncio.wait_for(run(), 30))
        positions = [u.position_ms for u in c._queue]
        assert len(positions) == bound and positions[0] == 2 and positions[-1] == bound + 1


def test_cli_hands_free_usage(tmp_path):
    wav = tmp_path / "x.wav"
    import wave
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(b"\0\0" * 1600)
    # A phrase the library refuses is a usage error (2), as in the C demo.
    r = _cli("--url", UNREACHABLE, "--file", str(wav), "--wakeword", "a b c d e f g h i")
    assert r.returncode == 2 and "wakeword='a b c d e f g h i'" in r.stderr, r.stderr
    assert _cli("--url", UNREACHABLE, "--file", str(wav), "--wakeword").returncode == 2


def test_headers_and_model_are_checked_when_the_client_is_made():
    # 0.6: request headers (Speechly and Riva), the model (Wyoming and Riva).
    with pytest.raises(sc.InvalidArgumentError, match="headers"):
        sc.Client(url="riva://127.0.0.1:1", headers={"bad name": "x"}, audio=sc.PushAudio())
    with pytest.raises(sc.InvalidArgumentError, match="headers"):
        sc.Client(url="riva://127.0.0.1:1", headers=[("grpc-timeout", "1S")], audio=sc.PushAudio())
    with pytest.raises(sc.InvalidArgumentError, match="model"):
        sc.Client(url="wyoming://127.0.0.1:1", model="two words", audio=sc.PushAudio())
    # authorization is the login's on a Speechly server.
    with pytest.raises(sc.InvalidArgumentError, match="authorization"):
        sc.Client(url="grpc://127.0.0.1:1", app_id="a", headers={"authorization": "Bearer x"}, audio=sc.PushAudio())
    c = sc.Client(url="riva://127.0.0.1:1", headers=[("authorization", "Bearer k"), ("function-id", "f")],
                  model="parakeet", audio=sc.PushAudio())
    c.close()


def test_a_wake_word_service_is_checked_when_the_client_is_made():
    # 0.7: a Wyoming wake-word service; given alone it asks for wakeword listening.
    with pytest.raises(sc.InvalidArgumentError, match="wakeword_url"):
        sc.Client(url="wyoming://127.0.0.1:1", wakeword_url="grpc://127.0.0.1:2", audio=sc.PushAudio())
    with pytest.raises(sc.InvalidArgumentError, match="wakeword_url"):
        sc.Client(url="wyoming://127.0.0.1:1", wakeword_url="wyoming://127.0.0.1:2", wakeword="hey jarvis",
                  audio=sc.PushAudio())
    c = sc.Client(url="wyoming://127.0.0.1:1", wakeword_url="wyoming://127.0.0.1:2", wakeword="hey_jarvis",
                  audio=sc.PushAudio())
    assert c.activation == sc.Activation.WAKEWORD
    c.close()


@pytest.fixture
def no_polling(monkeypatch):
    """Every wait slice of the binding a minute long: a wait that returns in time was woken."""
    from speechclient import _aio, client
    for module in (client, _aio):
        monkeypatch.setattr(module, "_IDLE_POLL_S", 60.0)
        monkeypatch.setattr(module, "_WAIT_SLICE_S", 60.0)


@pytest.mark.skipif(_native.spc_options_set_idle_cb is None, reason="needs the idle event (0.11)")
def test_application_waits_dispatching_the_last_events_do_not_wait_for_more(no_polling):
    """With delivery="application", the error, stop and idle events of a failed start are all
    pending when wait_idle() and updates() begin: running them is the end of the wait. (A wait
    that then slept on the event fd, where nothing more comes, lost up to 0.1 s each time.)"""
    import select
    for consume in ("wait_idle", "updates"):
        with push_client(delivery="application") as c:
            c.start()
            assert c._wait_idle_once(5000)  # the work is over: its events wait in the queue
            idle_waits = []
            real_wait = c._wait_event_fd

            def wait_event_fd(seconds, fd=c.event_fd):
                if not select.select([fd], [], [], 0)[0]:
                    idle_waits.append(seconds)  # a wait with nothing pending
                real_wait(seconds)
            c._wait_event_fd = wait_event_fd
            t0 = time.monotonic()
            if consume == "wait_idle":
                assert c.wait_idle(20)
            else:
                assert [type(u) for u in without_states(c.updates(timeout=20))] == [sc.ErrorEvent, sc.StopEvent]
            assert time.monotonic() - t0 < 5, consume
            assert idle_waits == [], consume
