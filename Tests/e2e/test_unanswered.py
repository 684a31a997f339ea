"""Servers that never answer, or answer in another protocol (issue 19 item 1, issue 23 item 3):
the client never reports READY for them, and fails within its timeouts with an error naming
what answered, the code and gRPC status the header promises. One row per failure:
failure -> error code, gRPC status, words of the message, the longest it may take."""
import json
import socket
import subprocess
import threading
import time

import pytest

from speechtools import DEMO, Server, hostile_server



class RawServer:
    """A TCP server on loopback that answers every connection the same way."""

    def __init__(self, mode):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = "grpc://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.mode = mode
        self.conns = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            if self.mode == "http1":
                c.recv(4096)
                c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                c.close()
            elif self.mode == "bytes":
                c.recv(4096)
                c.sendall(bytes(range(7, 250)))
            elif self.mode == "close":
                c.close()
            # "hung": accepts and never answers

    def stop(self):
        self.sock.close()
        for c in self.conns:
            c.close()


def refused_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"grpc://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def tls_server(tls_files):
    s = Server("--tls-cert", str(tls_files / "server.pem"), "--tls-key", str(tls_files / "server.key"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def no_started_server():
    with hostile_server("NoStarted") as url:
        yield url


CASES = [
    # name, error code, gRPC status, message words, most seconds (timeouts 1000,10000,1000)
    ("refused", "network error", 14, "refused", 3),
    ("hung", "timeout", 14, "no answer within 1000 ms", 4),
    ("http1", "network error", 14, "not an HTTP/2 server: it answered HTTP/1 ('HTTP/1.1 400 Bad Request')", 3),
    ("bytes", "network error", 14, "not an HTTP/2 server: it answered with unexpected bytes (07 08 09", 3),
    ("close", "network error", 14, "closed the connection without an HTTP/2 answer", 3),
    ("tls server dialled without tls", "network error", 14, "without an HTTP/2 answer", 3),
    ("plain server dialled with tls", "TLS error", 14, "does not speak TLS", 3),
    ("no start acknowledgement", "timeout", 14, "did not acknowledge the start of the context within 1000 ms", 8),
]


@pytest.mark.parametrize("name, code, status, words, most", CASES, ids=[c[0] for c in CASES])
def test_a_server_that_does_not_answer_is_never_ready_and_is_named(name, code, status, words, most, request,
                                                                  speech, tmp_path):
    raw = None
    extra = []
    if name in ("hung", "http1", "bytes", "close"):
        raw = RawServer(name)
        url = raw.url
    elif name == "refused":
        url = refused_url()
    elif name == "tls server dialled without tls":
        url = request.getfixturevalue("tls_server").url
    elif name == "plain server dialled with tls":
        server = request.getfixturevalue("server")
        url = server.url.replace("grpc://", "grpc+tls://")
        extra = ["--insecure"]
    else:
        url = request.getfixturevalue("no_started_server")
        extra = ["--reconnect", "1,100,100"]
    wav = speech("stop the music")
    began = time.monotonic()
    try:
        out = subprocess.run([str(DEMO), "--url", url, "--app-id", "e2e", "--file", str(wav), "--json",
                              "--timeouts-ms", "1000,10000,1000", "--cache-dir", str(tmp_path / "cache"), *extra],
                             capture_output=True, text=True, timeout=60)
    finally:
        if raw:
            raw.stop()
    took = time.monotonic() - began
    events = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    print(f"\n{name}: {took:.2f} s: {[e for e in events if e['type'] == 'error']}")
    assert out.returncode == 1, out.stdout + out.stderr
    errors = [e for e in events if e["type"] == "error"]
    assert errors, out.stdout
    e = errors[-1]
    assert (e["code"], e["grpc_status"]) == (code, status), e
    assert words in e["message"], e
    if name != "no start acknowledgement":
        # The server never answered: it was never READY (a start acknowledgement is asked for
        # on a connection that was).
        assert {"type": "state", "state": "ready"} not in events, out.stdout
    assert took < most, f"{took:.1f} s"
