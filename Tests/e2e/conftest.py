"""End-to-end fixtures: the real reference server on loopback and real synthesized speech."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "build" / "speechclient-demo"


def synthesize(text: str, path: pathlib.Path, rate: int = 16000, channels: int = 1) -> pathlib.Path:
    """espeak-ng speech converted by sox to PCM16 WAV at the given rate and channel count."""
    raw = path.with_suffix(".espeak.wav")
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(raw), text], check=True)
    subprocess.run(["sox", str(raw), "-r", str(rate), "-c", str(channels), "-b", "16",
                    "-e", "signed-integer", str(path)], check=True)
    raw.unlink()
    return path


class Server:
    def __init__(self, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "speechclient_server", "--host", "127.0.0.1", "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("listening on "):
            self.stop()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"reference server did not start: {line!r} {err}")
        self.address = line.split()[-1]
        self.url = f"grpc://{self.address}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def speech(tmp_path):
    def make(text: str, **kw) -> pathlib.Path:
        return synthesize(text, tmp_path / f"s{abs(hash((text, tuple(kw.items()))))}.wav", **kw)
    return make


def final_segments(stdout: str):
    import json
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return events, [e for e in events if e["type"] == "segment" and e["final"]]


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    """A throwaway CA and a server certificate for localhost / 127.0.0.1, made with openssl."""
    d = tmp_path_factory.mktemp("tls")
    def ossl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
         "-days", "2", "-subj", "/CN=speechclient test CA")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
         "-subj", "/CN=localhost")
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "server.pem", "-days", "2", "-extfile", "san.ext")
    return d
