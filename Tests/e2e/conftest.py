"""End-to-end fixtures: the real reference server on loopback and real synthesized speech."""
import pathlib
import subprocess

import pytest

from speechtools import DEMO, Server, final_segments, synthesize  # noqa: F401  (re-exported for the tests)


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
