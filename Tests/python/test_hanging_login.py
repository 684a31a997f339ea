"""free, suspend and wait_idle while a login hangs: the header's promises hold without waiting
out the login's 10 s deadline (the library cancels a connect or login in progress).

The server here is the `silent_server` fixture (conftest.py): it accepts TCP connections and never
answers, so a client stays STARTING inside its login. Every test resets those connections before
closing the client, so that a test costs only what it measures.
"""
import time

import pytest

import speechclient as sc
from conftest import DEVICE_ID

def _client(server, cache_dir, **kw):
    return sc.Client(server.url, app_id="py", audio=sc.PushAudio(16000, 1), device_id=DEVICE_ID,
                     cache_dir=cache_dir, **kw)


def _starting(server, cache_dir, **kw):
    """A client whose login is in flight on a server that never answers."""
    client = _client(server, cache_dir, **kw)
    client.start()
    assert server.wait_for_preface(), "the client never spoke HTTP/2 to the silent server"
    assert client.state == sc.State.STARTING
    return client


def test_close_does_not_wait_for_a_hanging_login(silent_server, cache_dir):
    # Header: spc_client_free() "Stops everything and frees the client: any open context is
    # abandoned (its stop callback is not called), the audio source and connections are closed".
    client = _starting(silent_server, cache_dir)
    t0 = time.monotonic()
    client.close()
    took = time.monotonic() - t0
    assert took < 2.0, f"close() took {took:.1f} s while the login hung"


def test_suspend_while_starting_is_idle_for_wait_idle(silent_server, cache_dir):
    # Header: spc_client_suspend() "Closes the microphone and the connections"; SUSPENDED means
    # "spc_client_suspend() closed the microphone and the connections"; spc_client_wait_idle()
    # returns once the client is "IDLE or SUSPENDED with no start queued and every callback for
    # the events so far has returned". The interrupted context ends with a stop and no error.
    errors = []
    client = _starting(silent_server, cache_dir, on_error=errors.append)
    try:
        client.suspend()
        assert client.state == sc.State.SUSPENDED
        idle = client.wait_idle(2.0)
        assert idle, "wait_idle(2 s) timed out although the client reports SUSPENDED"
        assert not errors, f"errors after suspend(): {errors}"
    finally:
        silent_server.close_all()
        client.close()


def test_resume_after_a_suspended_stop_is_really_idle(silent_server, cache_dir):
    # start, stop (STOPPING: waiting for the start's answer), suspend, resume: the state says
    # IDLE, so wait_idle() returns and a new start() starts.
    client = _starting(silent_server, cache_dir)
    try:
        client.stop()
        client.suspend()
        client.resume()
        assert client.state == sc.State.IDLE
        idle = client.wait_idle(2.0)
        assert idle, "wait_idle(2 s) timed out although the client reports IDLE"
    finally:
        silent_server.close_all()
        client.close()
