"""The server over TLS: a throwaway CA and a server certificate (SAN DNS:localhost,
IP:127.0.0.1) made with the openssl CLI at test time; grpcio's client verifies it."""
import subprocess

import grpc
import pytest

import measure


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "2", "-subj", "/CN=speechclient test CA", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=localhost", cwd=d)
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n"
                               "extendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "2", "-extfile", "san.ext", cwd=d)
    # A second CA that did not sign the server's certificate.
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other.key", "-out", "other.crt",
            "-days", "2", "-subj", "/CN=another CA", cwd=d)
    return d


@pytest.fixture(scope="module")
def server(pki):
    s = measure.ServerProcess("--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"))
    yield s
    assert s.stop() == 0


def channel(pki, server, host, ca="ca.crt"):
    creds = grpc.ssl_channel_credentials(root_certificates=(pki / ca).read_bytes())
    return grpc.secure_channel(f"{host}:{server.port}", creds)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_login_and_recognition_over_tls(pki, server, host):
    with channel(pki, server, host) as ch:
        stream = measure.Stream(ch, measure.login(ch))
        try:
            r = stream.context(measure.synthesize("turn on the kitchen lights"), paced=False)
        finally:
            stream.close()
    assert r["text"] == "turn on the kitchen lights"
    assert list(r["intents"].values()) == ["turn_on"]
    assert r["kinds"][0][1] == "started" and r["kinds"][-1][1] == "finished"


def test_a_certificate_from_another_ca_is_refused(pki, server):
    with channel(pki, server, "localhost", ca="other.crt") as ch:
        with pytest.raises(grpc.RpcError) as e:
            measure.login(ch)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def test_plaintext_is_not_served_on_the_tls_port(server):
    with grpc.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            measure.login(ch)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
