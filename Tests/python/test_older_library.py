"""The binding against an older release of the library.

`make test-old-library` builds release 0.1.0 from git history and runs this file with
SPEECHCLIENT_LIBRARY pointing at it and SPEECHCLIENT_OLDER_RELEASE=0.1.0. A program shipped with
this binding on a machine that still has 0.1 must work with what 0.1 has, and fail with a clear
error, naming the release it needs, for what 0.1 lacks: never a crash or a missing symbol. Without
that variable (the rest of the Python suite, against the library just built) conftest does not
collect this file.
"""
import asyncio
import os

import pytest

import speechclient as sc
from speechclient import _native

OLDER = os.environ.get("SPEECHCLIENT_OLDER_RELEASE")

UNREACHABLE = "grpc://127.0.0.1:1"


def test_the_older_library_is_loaded_and_says_so():
    assert sc.version() == OLDER
    major, minor, patch = (int(x) for x in OLDER.split("."))
    assert sc.version_number() == major * 1_000_000 + minor * 1_000 + patch
    # 0.1 has the state callback and application delivery, and none of 0.2, 0.3 and 0.4.
    assert _native.HAS_STATE_AND_DELIVERY
    assert not _native.HAS_HANDS_FREE and not _native.HAS_APPLICATION_IO and not _native.HAS_IO_DISPATCH


@pytest.mark.parametrize("option, kwargs, release", [
    ("activation", {"activation": "voice"}, "0.2"),
    ("wakeword", {"wakeword": "hey computer"}, "0.2"),
    ("levels", {"levels": True}, "0.2"),
    ("levels", {"on_level": print}, "0.2"),
    ("vad", {"vad": {"snr_db": 6}}, "0.2"),
    ("endpointing", {"endpointing": (300, 1000, 500, 15000)}, "0.2"),
    ("io", {"io": "application"}, "0.3"),
    ("wakeword_url", {"wakeword_url": "wyoming://127.0.0.1:1"}, "0.7"),
    ("timeouts", {"timeouts": (5000, 10000, 10000)}, "0.8"),
    ("audio", {"audio": sc.AudioStream(0)}, "0.9"),
])
def test_a_newer_option_is_an_error_naming_the_release(option, kwargs, release):
    with pytest.raises(sc.InvalidArgumentError) as info:
        sc.Client(url=UNREACHABLE, app_id="a", **kwargs)
    assert info.value.code == sc.Status.INVALID_ARGUMENT and info.value.option == option
    assert f"is libspeechclient {OLDER}" in str(info.value) and f"({release})" in str(info.value)


def test_newer_process_wide_functions_are_errors_naming_the_release():
    for call, release in ((sc.io_fd, "0.3"), (sc.io_process, "0.3"), (sc.io_dispatch, "0.4"), (sc.audio_devices, "0.8")):
        with pytest.raises(sc.InvalidStateError) as info:
            call()
        assert info.value.code == sc.Status.INVALID_STATE
        assert str(info.value).startswith(f"{_native.LIBRARY_PATH} is libspeechclient {OLDER}, without")
        assert str(info.value).endswith(f"({release})")


def test_the_connection_state_on_demand_is_an_error_naming_the_release():
    with sc.Client(url=UNREACHABLE, app_id="a", audio=sc.PushAudio(16000, 1)) as c:
        with pytest.raises(sc.InvalidStateError, match=r"\(0\.8\)"):
            c.connection_state


@pytest.mark.e2e
def test_a_file_is_transcribed_through_the_older_library(server, synthesize, cache_dir):
    wav = synthesize("turn on the kitchen lights")
    with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir) as c:
        c.start()
        updates = [u for u in c.updates(timeout=30) if not isinstance(u, sc.StateEvent)]
        assert c.wait_idle(5) and c.state == sc.State.IDLE
    assert isinstance(updates[0], sc.StartEvent) and isinstance(updates[-1], sc.StopEvent)
    final = [u for u in updates if isinstance(u, sc.Segment) and u.final][-1]
    assert final.transcript == "turn on the kitchen lights"
    assert final.intent == sc.Intent("turn_on", True)
    assert final.entities == (sc.Entity("room", "kitchen", 3, 4, True),)
    # 0.8's confidences are absent, not an error.
    assert final.confidence is None and all(w.confidence is None for w in final.words)


@pytest.mark.e2e
def test_application_delivery_in_asyncio_through_the_older_library(server, synthesize, cache_dir):
    wav = synthesize("stop the music")

    async def run():
        with sc.Client(url=server.url, app_id="py", delivery="application", audio=sc.WavFile(wav),
                       cache_dir=cache_dir) as c:
            return [u async for u in c.stream()]

    updates = asyncio.run(asyncio.wait_for(run(), 60))
    final = [u for u in updates if isinstance(u, sc.Segment) and u.final][-1]
    assert final.transcript == "stop the music"
