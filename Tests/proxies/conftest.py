"""Fixtures of the real-proxy suite: three replicas sharing a token secret, the recordings
(synthesized once per run into pytest's temp dir, never committed) and the proxies' binaries."""
import shutil

import pytest

import proxytools as pt


def pytest_collection_modifyitems(config, items):
    missing = [b for b in ("nginx", "haproxy", "ss", "espeak-ng", "sox") if not shutil.which(b)]
    if missing:
        # Installed by scripts/setup-debian.sh: a missing one is a broken set-up, not a skip.
        raise pytest.UsageError(f"the proxy suite needs {', '.join(missing)} on PATH "
                                "(scripts/setup-debian.sh installs them)")


@pytest.fixture(scope="session")
def replicas():
    r = pt.Replicas(3)
    yield r
    r.stop()


@pytest.fixture
def live_replicas(replicas):
    """The session's replicas, every one running (a scenario may have killed one)."""
    replicas.ensure_all_alive()
    return replicas


@pytest.fixture(scope="session")
def recording(tmp_path_factory):
    """The 24 phrases with 1.5-2 s pauses (~87 s): (path, seconds)."""
    return pt.make_recording(tmp_path_factory.mktemp("recording") / "phrases.wav")


@pytest.fixture(scope="session")
def recording_with_gap(tmp_path_factory):
    """The same phrases with 12 s of silence after the twelfth: (path, seconds)."""
    return pt.make_recording(tmp_path_factory.mktemp("recording-gap") / "phrases-gap.wav",
                             gap_after=11, gap_s=12.0)
