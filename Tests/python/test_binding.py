"""The Python binding against the real library (no server needed: a closed port gives the
documented network error)."""
import array
import asyncio
import gc

import pytest

import speechclient as sc
from speechclient import _native
UNREACHABLE = "grpc://127.0.0.1:1"  # a closed port: the documented network error


def push_client(**kw):
    return sc.Client(UNREACHABLE, app_id="py", audio=sc.PushAudio(16000, 1),
                     device_id="12345678-1234-4234-8234-123456789abc", **kw)


def test_version_matches_the_header():
    assert sc.version().count(".") == 2
    assert _native.spc_version_number() // 1_000_000 == _native.SUPPORTED_MAJOR


@pytest.mark.parametrize("status", list(sc.Status)[1:])
def test_every_status_has_its_exception(status):
    e = sc.error_for(status, "m")
    assert e.code == status and isinstance(e, sc.SpeechClientError)
    assert type(e).__name__.lower().startswith(status.name.lower().replace("_", "")[:4]) or status in (
        sc.Status.TIMEOUT, sc.Status.API)
    assert sc.status_text(status) != "unknown status"


@pytest.mark.parametrize("kwargs, text", [
    (dict(url="ftp://x"), "url"),
    (dict(url="grpc://host/path"), "url"),
    (dict(url=UNREACHABLE, app_id="a", chunk_ms=5), "chunk_ms"),
    (dict(url=UNREACHABLE, app_id="a", audio=sc.PushAudio(1000, 1)), "push audio"),
    (dict(url=UNREACHABLE, app_id="a", audio=sc.PushAudio(16000, 9)), "push audio"),
    (dict(url=UNREACHABLE, app_id="a", device_id="nope"), "device_id"),
    (dict(url=UNREACHABLE, app_id="a", language="x"), "language"),
    (dict(url=UNREACHABLE), "neither an app id nor a project id"),
])
def test_option_errors_name_the_option(kwargs, text):
    with pytest.raises(sc.InvalidArgumentError) as info:
        sc.Client(**kwargs)
    assert text in str(info.value)


def test_missing_wav_is_an_audio_error_naming_the_path(tmp_path):
    missing = tmp_path / "missing.wav"
    with pytest.raises(sc.AudioError) as info:
        sc.Client(UNREACHABLE, app_id="a", audio=sc.WavFile(str(missing)))
    assert str(missing) in str(info.value)


def test_unreachable_server_gives_network_error_then_stop(silent_wav, tmp_path):
    with sc.Client(UNREACHABLE, app_id="a", audio=sc.WavFile(str(silent_wav)), cache_dir=str(tmp_path)) as c:
        c.start()
        updates = list(c.updates(timeout=20))
        assert [type(u) for u in updates] == [sc.ErrorEvent, sc.StopEvent]
        assert updates[0].code == sc.Status.NETWORK and "127.0.0.1" in updates[0].message
        assert updates[0].grpc_status is None
        assert updates[1].context_id == ""
        assert c.wait_idle(5)
        assert c.state == sc.State.IDLE


def test_async_updates(silent_wav, tmp_path):
    async def run():
        with sc.Client(UNREACHABLE, app_id="a", audio=sc.WavFile(str(silent_wav)), cache_dir=str(tmp_path)) as c:
            c.start()
            return [u async for u in c.aupdates()]
    updates = asyncio.run(asyncio.wait_for(run(), 20))
    assert [type(u) for u in updates] == [sc.ErrorEvent, sc.StopEvent]


def test_wrong_states_raise_invalid_state():
    with push_client() as c:
        with pytest.raises(sc.InvalidStateError):
            c.stop()
        with pytest.raises(sc.InvalidStateError):
            c.resume()
        with pytest.raises(sc.InvalidStateError):
            c.push_end()
        c.suspend()
        assert c.state == sc.State.SUSPENDED
        with pytest.raises(sc.InvalidStateError):
            c.start()
        c.resume()
    mic = sc.Client(UNREACHABLE, app_id="a")
    with pytest.raises(sc.InvalidStateError):
        mic.push(b"\0\0")
    mic.close()


def test_close_is_idempotent_and_calls_after_close_fail():
    c = push_client()
    c.close()
    c.close()
    assert c.closed
    with pytest.raises(sc.InvalidStateError):
        c.start()


def test_push_accepts_every_buffer_type():
    with push_client() as c:
        c.push(b"\0\0" * 160)
        c.push(bytearray(320))
        c.push(memoryview(bytearray(320)))
        c.push(array.array("h", [0] * 160))
        c.push(b"")
        with pytest.raises(sc.InvalidArgumentError, match="16-bit"):
            c.push(b"\0\0\0")
        try:
            import numpy
        except ImportError:
            numpy = None
        if numpy is not None:
            c.push(numpy.zeros(160, dtype=numpy.int16))


def test_callback_exceptions_do_not_reach_c_and_are_reraised(silent_wav, tmp_path):
    import threading
    raised = threading.Event()

    def boom(update):
        raised.set()
        raise RuntimeError("from a callback")
    c = sc.Client(UNREACHABLE, app_id="a", audio=sc.WavFile(str(silent_wav)), on_error=boom, cache_dir=str(tmp_path))
    c.start()
    assert raised.wait(20)
    # The process is alive, and the next call on the client raises the callback's exception once.
    with pytest.raises(RuntimeError, match="from a callback"):
        c.wait_idle(20)
    assert c.wait_idle(20)
    c.close()


def test_api_calls_from_inside_callbacks(tmp_path, silent_wav):
    seen = {}

    def on_stop(event):
        try:
            client.close()
        except sc.InvalidStateError as e:
            seen["close"] = e
        if "restarted" not in seen:
            seen["restarted"] = True
            client.start()

    client = sc.Client(UNREACHABLE, app_id="a", audio=sc.WavFile(str(silent_wav)), on_stop=on_stop,
                       cache_dir=str(tmp_path))
    client.start()
    updates = list(client.updates(timeout=20))
    assert isinstance(seen.get("close"), sc.InvalidStateError)
    assert client.wait_idle(20)
    client.close()
    assert sum(isinstance(u, sc.StopEvent) for u in updates) >= 1


def test_many_clients_created_and_closed():
    for _ in range(200):
        c = push_client()
        c.close()
    gc.collect()
