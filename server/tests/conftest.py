"""The real server as a subprocess on 127.0.0.1 port 0, driven by grpcio's own client built
from the same stubs. Speech is synthesized at test time (espeak-ng + sox), never committed."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import Iterable, List, Optional

# The server under test is this source tree, not a copy installed into the venv earlier: in this
# process and in the servers it starts.
SOURCE = str(pathlib.Path(__file__).resolve().parents[1])
sys.path.insert(0, SOURCE)
os.environ["PYTHONPATH"] = os.pathsep.join([SOURCE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

import grpc
import pytest

from speechclient_server._proto.speechly.identity.v2 import identity_pb2 as idp, identity_pb2_grpc
from speechclient_server._proto.speechly.slu.v1 import slu_pb2 as slu, slu_pb2_grpc

SECRET = "test-secret"


class Server:
    def __init__(self, *args: str, tls_ca: Optional[bytes] = None):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "speechclient_server", "--host", "127.0.0.1",
                                      "--port", "0", "--secret", SECRET, *args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.stop()
            self.log.seek(0)
            raise RuntimeError(f"server did not start: {line!r} {self.log.read().decode()}")
        self.first_line = line
        self.address = line.split()[-1]
        self.port = int(self.address.rsplit(":", 1)[1])
        if tls_ca is None:
            self.channel = grpc.insecure_channel(self.address)
        else:
            self.channel = grpc.secure_channel(f"localhost:{self.port}", grpc.ssl_channel_credentials(tls_ca))

    def login(self, app_id: str = "app", device_id: str = "dev", **kw) -> idp.LoginResponse:
        stub = identity_pb2_grpc.IdentityAPIStub(self.channel)
        return stub.Login(idp.LoginRequest(device_id=device_id, application=idp.ApplicationScope(app_id=app_id)),
                          timeout=10, **kw)

    def call(self, requests: Iterable, token: Optional[str] = None, timeout: float = 60):
        md = [("authorization", f"Bearer {token}")] if token else []
        return slu_pb2_grpc.SLUStub(self.channel).Stream(iter(requests), metadata=md, timeout=timeout)

    def stream(self, requests: Iterable, token: Optional[str] = None, timeout: float = 60) -> List:
        return list(self.call(requests, token, timeout))

    def stop(self) -> None:
        if getattr(self, "channel", None) is not None:
            self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


@pytest.fixture
def start_server():
    """Starts servers with extra arguments; stops them all at the end of the test."""
    started = []

    def start(*args, **kw) -> Server:
        s = Server(*args, **kw)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def speech(tmp_path_factory):
    """speech(text, rate=16000) -> PCM16 mono bytes of espeak-ng saying text."""
    cache = {}
    folder = tmp_path_factory.mktemp("speech")

    def make(text: str, rate: int = 16000) -> bytes:
        key = (text, rate)
        if key not in cache:
            wav, raw = folder / f"{len(cache)}.wav", folder / f"{len(cache)}.raw"
            subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(wav), text], check=True)
            subprocess.run(["sox", "-R", str(wav), "-r", str(rate), "-c", "1", "-b", "16", "-e", "signed-integer",
                            str(raw)], check=True)
            cache[key] = raw.read_bytes()
        return cache[key]
    return make


def silence(seconds: float, rate: int = 16000) -> bytes:
    return b"\0\0" * int(seconds * rate)


def config(rate: int = 16000, channels: int = 1, **kw) -> slu.SLURequest:
    return slu.SLURequest(config=slu.SLUConfig(channels=channels, sample_rate_hertz=rate,
                                               language_code=kw.pop("language_code", "en-US"), **kw))


def start(app_id: str = "") -> slu.SLURequest:
    return slu.SLURequest(start=slu.SLUStart(app_id=app_id))


def stop() -> slu.SLURequest:
    return slu.SLURequest(stop=slu.SLUStop())


def audio_chunks(pcm: bytes, rate: int = 16000, ms: int = 100) -> List[slu.SLURequest]:
    n = rate * ms // 1000 * 2
    return [slu.SLURequest(audio=pcm[i:i + n]) for i in range(0, len(pcm), n)]


def context_requests(pcm: bytes, rate: int = 16000) -> List[slu.SLURequest]:
    return [start(), *audio_chunks(pcm, rate), stop()]


def kind(r) -> str:
    return r.WhichOneof("streaming_response")


def jwt_claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def make_jwt(claims: dict, secret: str = SECRET) -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = b64(hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{sig}"


def final_words(responses) -> dict:
    """{segment id: [SLUTranscript, ...]} of the final words."""
    words: dict = {}
    for r in responses:
        if r.HasField("transcript"):
            words.setdefault(r.segment_id, []).append(r.transcript)
    return words


def texts(responses) -> List[str]:
    w = final_words(responses)
    return [" ".join(t.word for t in w[k]) for k in sorted(w)]


def word_errors(ref: List[str], hyp: List[str]) -> int:
    d = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(hyp)]


ROOT = pathlib.Path(__file__).resolve().parents[1]
