"""pytest setup for the Python binding.

- The library: $SPEECHCLIENT_LIBRARY (set by `make test-python`), else build/libspeechclient.so.0.
- The binding: bindings/python from the source tree, so the tests run without `pip install`.
- Tests marked `e2e` need the reference server (scripts/setup-debian.sh installs it); they fail
  when the package `speechclient_server` is not importable. They use the `server` fixture.
"""
import importlib.util
import os
import pathlib
import struct
import sys
import wave

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))
os.environ.setdefault("SPEECHCLIENT_LIBRARY", str(ROOT / "build" / "libspeechclient.so.0"))
E2E_TOOLS = ROOT / "Tests" / "e2e"  # speechtools: the server on loopback, synthesized speech

#: A closed port on loopback: connecting gives the documented network error at once.
UNREACHABLE = "grpc://127.0.0.1:1"
#: A fixed device id, so that tests neither generate nor persist one.
DEVICE_ID = "12345678-1234-4234-8234-123456789abc"

SERVER_IMPORTABLE = importlib.util.find_spec("speechclient_server") is not None


# The older-library file runs only under `make test-old-library` (it sets this variable): in
# the rest of the suite it is not collected, rather than skipped test by test.
collect_ignore = [] if os.environ.get("SPEECHCLIENT_OLDER_RELEASE") else ["test_older_library.py"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "e2e: end-to-end against the reference server (installed by scripts/setup-debian.sh)")


def pytest_runtest_setup(item):
    # A missing server is a broken set-up, not a skip: each e2e test fails, saying what to run.
    if "e2e" in item.keywords and not SERVER_IMPORTABLE:
        pytest.fail("the reference server is not installed in this venv: run scripts/setup-debian.sh "
                    "(or pip install ./server)")


@pytest.fixture(scope="session")
def server():
    """The reference server on a free loopback port, for the session."""
    if str(E2E_TOOLS) not in sys.path:
        sys.path.insert(0, str(E2E_TOOLS))
    from speechtools import Server
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def own_server():
    """own_server() -> a reference server that only the calling test uses, stopped when it ends.
    For comparing two runs: the shared `server`'s recognizers keep some state from what earlier
    runs and tests sent, so the same file can come out with a word boundary 10 ms apart."""
    if str(E2E_TOOLS) not in sys.path:
        sys.path.insert(0, str(E2E_TOOLS))
    from speechtools import Server
    started = []

    def start():
        started.append(Server())
        return started[-1]
    yield start
    for s in started:
        s.stop()


@pytest.fixture
def synthesize(tmp_path):
    """speak(text) -> a 16 kHz mono WAV of espeak-ng saying it."""
    if str(E2E_TOOLS) not in sys.path:
        sys.path.insert(0, str(E2E_TOOLS))
    from speechtools import synthesize as synth
    counter = iter(range(1_000_000))
    return lambda text, **kw: synth(text, tmp_path / f"speech{next(counter)}.wav", **kw)


def write_wav(path, samples, rate=16000, channels=1):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(struct.pack(f"<{len(samples)}h", *samples))
    return path


@pytest.fixture
def silent_wav(tmp_path):
    return write_wav(tmp_path / "silence.wav", [0] * 1600)


@pytest.fixture
def cache_dir(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    return str(d)


class SilentServer:
    """A TCP listener on loopback that accepts connections and never answers: a client stays
    STARTING (logging in) until close_all() resets the connections."""

    def __init__(self):
        import socket
        import threading
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"grpc://127.0.0.1:{self._sock.getsockname()[1]}"
        self._conns = []
        self._lock = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
                self._lock.notify_all()

    def wait_for_connection(self, timeout=10.0):
        with self._lock:
            return self._lock.wait_for(lambda: self._conns, timeout)

    def wait_for_preface(self, timeout=10.0):
        """Waits until the first connection has carried the client's HTTP/2 preface and SETTINGS
        (the client then waits for the server's, with its login in hand), reading what the
        client writes; nothing is answered."""
        import time
        deadline = time.monotonic() + timeout
        if not self.wait_for_connection(timeout):
            return False
        with self._lock:
            conn = self._conns[0]
        data = b""
        while time.monotonic() < deadline:
            # The client preface (24 bytes), then frames: 3 bytes of length, 1 of type (4: SETTINGS).
            pos = 24
            while len(data) >= pos + 9:
                if data[pos + 3] == 4:
                    return True
                pos += 9 + int.from_bytes(data[pos:pos + 3], "big")
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                more = conn.recv(65536)
            except OSError:
                return False
            if not more:
                return False
            data += more
        return False

    def close_all(self):
        import socket
        import struct
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
            c.close()

    def stop(self):
        self._sock.close()
        self.close_all()


@pytest.fixture
def silent_server():
    s = SilentServer()
    yield s
    s.stop()
