"""pytest setup for the Python binding: the built library (SPEECHCLIENT_LIBRARY, set by
`make test-python`) and the binding from the source tree when it is not installed."""
import os
import pathlib
import struct
import sys
import wave

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))
os.environ.setdefault("SPEECHCLIENT_LIBRARY", str(ROOT / "build" / "libspeechclient.so.0"))
sys.path.insert(0, str(ROOT / "Tests" / "e2e"))

UNREACHABLE = "grpc://127.0.0.1:1"


@pytest.fixture
def silent_wav(tmp_path):
    path = tmp_path / "silence.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(struct.pack("<1600h", *([0] * 1600)))
    return path
