"""Fixtures of the Wyoming backend suite: the real servers (started once per session on
loopback, stopped at the end) and the synthesized speech (made at test time in pytest's temp
dir, never committed). A server or tool that is not installed fails the tests that need it,
naming scripts/setup-debian.sh: a missing peer is a broken set-up, not a skip."""
import shutil

import pytest

import wyomingtools as wt


def _need(*tools):
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        pytest.fail(f"{', '.join(missing)} not on PATH: {wt.SETUP} installs them", pytrace=False)


def _start(factory, **kwargs):
    try:
        return factory(**kwargs)
    except wt.PeerMissing as e:
        missing = str(e)
    pytest.fail(missing, pytrace=False)


@pytest.fixture(scope="session")
def asr():
    """wyoming-faster-whisper on tcp://127.0.0.1:<free port>."""
    server = _start(wt.WyomingASR)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def asr_unix():
    """wyoming-faster-whisper on a unix socket in a temp dir."""
    server = _start(wt.WyomingASR, unix=True)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def wake():
    """wyoming-openwakeword with hey_jarvis preloaded, on tcp://127.0.0.1:<free port>."""
    server = _start(wt.WyomingWake)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def speech(tmp_path_factory):
    """speech(text) -> a 16 kHz mono s16 WAV of espeak-ng (en-us, 160 wpm) saying it."""
    _need("espeak-ng", "sox")
    folder = tmp_path_factory.mktemp("espeak")
    made = {}

    def make(text: str):
        if text not in made:
            made[text] = wt.synthesize(text, folder / f"s{len(made)}.wav")
        return made[text]
    return make


@pytest.fixture(scope="session")
def flite_speech(tmp_path_factory):
    """flite_speech(text, lead_s, tail_s) -> a 16 kHz mono s16 WAV of flite's slt voice."""
    _need("flite", "sox")
    folder = tmp_path_factory.mktemp("flite")
    made = {}

    def make(text: str, lead_s: float = 1.0, tail_s: float = 1.0):
        key = (text, lead_s, tail_s)
        if key not in made:
            made[key] = wt.synthesize_flite(text, folder / f"f{len(made)}.wav", lead_s=lead_s, tail_s=tail_s)
        return made[key]
    return make


@pytest.fixture(scope="session")
def vad_asr():
    """Tests/peers/wyoming_vad_asr.py (the real wyoming library and faster-whisper, with its own
    endpointing) on tcp://127.0.0.1:<free port>."""
    server = _start(wt.WyomingVadASR)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def asr_endpointing():
    """wyoming-faster-whisper with --vad-endpointing 0.5: Silero VAD ends each utterance, one
    transcript per connection (its info says requires_external_vad: false)."""
    server = _start(wt.WyomingASR, extra_args=["--vad-endpointing", "0.5"])
    yield server
    server.stop()
