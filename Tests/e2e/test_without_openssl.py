"""The library without OpenSSL: libssl is opened when a TLS connection is first made, not linked,
so a plaintext client (grpc://, a Wyoming service on tcp://) never maps it, and a TLS URL on a
machine without it fails with an error naming the package. OpenSSL is hidden for real: in a
private mount namespace (unshare, as root) /dev/null is bind-mounted over the system's
libssl.so.3 and libcrypto.so.3."""
import os
import socket
import subprocess
import sysconfig

from speechtools import DEMO, Server, final_segments

# This architecture's copies (a libssl3:i386 beside them is not the one the demo would load).
ARCH_DIR = f"/usr/lib/{sysconfig.get_config_var('MULTIARCH')}"
OPENSSL = [f"{ARCH_DIR}/{name}" for name in ("libssl.so.3", "libcrypto.so.3")]


def without_openssl(*command):
    assert all(os.path.exists(lib) for lib in OPENSSL), \
        f"libssl3 is part of the test set-up (the TLS tests use it): {OPENSSL}"
    mounts = " && ".join(f'mount --bind /dev/null "{lib}"' for lib in OPENSSL)
    return subprocess.run(["unshare", "--mount", "sh", "-c", mounts + ' && exec "$@"', "sh", *map(str, command)],
                          capture_output=True, text=True, timeout=60)


def test_the_library_does_not_link_openssl():
    lib = DEMO.parent / "libspeechclient.so.0"
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "libssl" not in needed and "libcrypto" not in needed, needed


def test_plaintext_does_not_load_openssl_where_it_is_installed(server, speech, tmp_path):
    """The point of not linking it: a call to OpenSSL on a path plaintext takes would load it."""
    wav = speech("turn on the kitchen lights")
    r = subprocess.run([str(DEMO), "--url", server.url, "--app-id", "nossl", "--file", str(wav), "--json",
                        "--cache-dir", str(tmp_path / "c")], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, LD_DEBUG="files"))
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = [line for line in r.stderr.splitlines() if "file=" in line and "[0];" in line]
    assert any("libnghttp2.so.14" in line for line in loaded), r.stderr[-2000:]  # LD_DEBUG did report
    assert not any("libssl" in line or "libcrypto" in line for line in loaded), loaded


def test_plaintext_is_transcribed_without_openssl(server, speech, tmp_path):
    wav = speech("turn on the kitchen lights")
    r = without_openssl(DEMO, "--url", server.url, "--app-id", "nossl", "--file", wav, "--json",
                        "--cache-dir", tmp_path / "c")
    assert r.returncode == 0, r.stderr
    _, finals = final_segments(r.stdout)
    assert [f["transcript"] for f in finals] == ["turn on the kitchen lights"]


def test_tls_without_openssl_names_the_package(speech, tmp_path, tls_files):
    s = Server("--tls-cert", str(tls_files / "server.pem"), "--tls-key", str(tls_files / "server.key"))
    try:
        port = s.address.rsplit(":", 1)[1]
        wav = speech("turn on the kitchen lights")
        args = ["--url", f"grpc+tls://localhost:{port}", "--app-id", "nossl", "--file", wav,
                "--ca-file", tls_files / "ca.pem", "--cache-dir", tmp_path / "c"]
        r = without_openssl(DEMO, *args)
        assert r.returncode != 0
        assert "TLS needs OpenSSL 3, which is not installed" in r.stderr, r.stderr
        assert "install the libssl3 package" in r.stderr
        # The same command with OpenSSL in place: the failure was OpenSSL's absence, nothing else.
        r = subprocess.run([str(DEMO), *map(str, args), "--json"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        _, finals = final_segments(r.stdout)
        assert [f["transcript"] for f in finals] == ["turn on the kitchen lights"]
    finally:
        s.stop()


def test_tls_without_openssl_names_the_package_while_the_server_is_away(speech, tmp_path):
    """A TLS connect that fails still reports the missing OpenSSL first: with reconnection, the
    network errors would otherwise be retried with nothing saying what to install."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    wav = speech("turn on the kitchen lights")
    r = without_openssl(DEMO, "--url", f"grpc+tls://127.0.0.1:{port}", "--app-id", "nossl", "--file", wav,
                        "--cache-dir", tmp_path / "c")
    assert r.returncode != 0
    assert "TLS needs OpenSSL 3, which is not installed" in r.stderr, r.stderr
