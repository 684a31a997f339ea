"""Issue 4: with prepare-on-init, the constructor's error tells the three failures the old SDK
could not tell apart: the server is unreachable, the server refuses the app id, the microphone
cannot be opened."""
import pytest

import speechclient as sc
from speechtools import Server


def client(url, tmp_path, **kw):
    kw.setdefault("audio", sc.PushAudio(16000, 1))
    return sc.Client(url, app_id=kw.pop("app_id", "e2e"), prepare_on_init=True, cache_dir=str(tmp_path), **kw)


def test_unreachable_server_is_a_network_error(tmp_path):
    with pytest.raises(sc.NetworkError) as e:
        client("grpc://127.0.0.1:1", tmp_path)
    assert "127.0.0.1:1" in str(e.value)


def test_refused_app_id_is_an_auth_error(tmp_path):
    s = Server("--allow-app-id", "someone-else")
    try:
        with pytest.raises(sc.AuthError) as e:
            client(s.url, tmp_path, app_id="not-allowed")
        assert e.value.grpc_status == 7 and "unknown app id" in str(e.value)
    finally:
        s.stop()


def test_missing_microphone_is_an_audio_error(server, tmp_path):
    with pytest.raises(sc.AudioError) as e:
        client(server.url, tmp_path, audio=sc.Microphone("no-such-capture-device"))
    assert "no-such-capture-device" in str(e.value)


def test_a_missing_microphone_is_said_by_the_library_alone(server, tmp_path):
    """Issue 19 item 7: ALSA printed its own 'ALSA lib pcm.c:...: Unknown PCM' line on stderr,
    past the log callback. Now ALSA's words are in the error (and the log), and nothing else
    reaches stderr."""
    import subprocess
    from speechtools import DEMO
    out = subprocess.run([str(DEMO), "--url", server.url, "--mic", "no-such-capture-device",
                          "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1, out.stderr
    assert "ALSA lib" not in out.stderr, out.stderr
    assert "ALSA says: Unknown PCM no-such-capture-device" in out.stderr, out.stderr


def test_all_good_is_ready_before_the_first_start(server, tmp_path):
    states = []
    with client(server.url, tmp_path, on_state=states.append) as c:
        assert c.state == sc.State.IDLE
    assert [s.state for s in states][:2] == [sc.ConnectionState.CONNECTING, sc.ConnectionState.READY], states
