"""More end-to-end runs of the library against the real reference server: several phrases
(word error rate), TLS with a generated CA, an expired cached token, and the ALSA capture path."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from speechtools import DEMO, ROOT, Server, final_segments, word_errors

BINDING = ROOT / "bindings" / "python"

# Command phrases of the bundled intents file; the bound below is what PocketSphinx with the
# generated grammar reaches on espeak-ng speech (recognizer.md measured 2.8 %).
SENTENCES = [
    "turn on the kitchen lights",
    "turn off the bedroom lights",
    "turn on the living room lights",
    "set a timer for five minutes",
    "set a timer for twenty minutes",
    "play some jazz music",
    "play some classical music",
    "stop the music",
    "what time is it",
    "turn off the garage lights",
]
WER_BOUND = 0.10


def demo(url, wav, tmp_path, *extra, timeout=60):
    return subprocess.run([str(DEMO), "--url", url, "--app-id", "e2e", "--file", str(wav),
                           "--cache-dir", str(tmp_path / "cache"), "--json", *extra],
                          capture_output=True, text=True, timeout=timeout)


def test_word_error_rate_on_command_phrases(server, speech, tmp_path):
    errors = words = 0
    for text in SENTENCES:
        out = demo(server.url, speech(text), tmp_path)
        assert out.returncode == 0, out.stderr
        _, finals = final_segments(out.stdout)
        hyp = " ".join(f["transcript"] for f in finals).split()
        errors += word_errors(text.split(), hyp)
        words += len(text.split())
    wer = errors / words
    print(f"figure: WER {wer:.1%} over {len(SENTENCES)} espeak-ng phrases ({errors}/{words} words)")
    assert wer <= WER_BOUND


def test_intents_and_entities_for_commands(server, speech, tmp_path):
    # What the library must carry through is checked here, not the recognizer's accuracy
    # (test_word_error_rate_on_command_phrases): PocketSphinx hears espeak-ng's "ten minutes"
    # as "two minutes", so the phrase is one it recognises reliably.
    out = demo(server.url, speech("set a timer for five minutes"), tmp_path)
    _, finals = final_segments(out.stdout)
    assert finals[-1]["intent"] == {"intent": "set_timer", "final": True}
    assert [(e["type"], e["value"], e["start"], e["end"]) for e in finals[-1]["entities"]] == [("minutes", "five", 4, 5)]


def test_project_scoped_login_names_the_app_in_each_start(server, speech, tmp_path):
    out = demo(server.url, speech("turn on the kitchen lights"), tmp_path, "--project-id", "e2e-project")
    assert out.returncode == 0, out.stderr
    _, finals = final_segments(out.stdout)
    assert " ".join(f["transcript"] for f in finals) == "turn on the kitchen lights"


def test_two_phrases_make_two_segments(server, speech, tmp_path):
    a, b = speech("turn on the kitchen lights"), speech("stop the music")
    both = tmp_path / "both.wav"
    subprocess.run(["sox", "-R", str(a), "-n", "trim", "0", "0"], check=True)
    subprocess.run(["sox", "-R", str(a), str(both), "pad", "0", "1.2"], check=True)
    joined = tmp_path / "joined.wav"
    subprocess.run(["sox", "-R", str(both), str(b), str(joined)], check=True)
    out = demo(server.url, joined, tmp_path)
    assert out.returncode == 0, out.stderr
    _, finals = final_segments(out.stdout)
    assert [f["transcript"] for f in finals] == ["turn on the kitchen lights", "stop the music"]
    assert [f["segment_id"] for f in finals] == [0, 1]
    assert finals[1]["words"][0]["start_ms"] > finals[0]["words"][-1]["end_ms"] + 1000


def test_tls_with_a_generated_ca(speech, tmp_path, tls_files):
    s = Server("--tls-cert", str(tls_files / "server.pem"), "--tls-key", str(tls_files / "server.key"))
    try:
        port = s.address.rsplit(":", 1)[1]
        wav = speech("play some rock music")
        ok = demo(f"grpc+tls://localhost:{port}", wav, tmp_path, "--ca-file", str(tls_files / "ca.pem"))
        assert ok.returncode == 0, ok.stderr
        _, finals = final_segments(ok.stdout)
        assert finals[-1]["transcript"] == "play some rock music"
        # Without the CA the system store does not know the certificate: a TLS error, not a hang.
        bad = demo(f"grpc+tls://localhost:{port}", wav, tmp_path)
        assert bad.returncode == 1
        events, _ = final_segments(bad.stdout)
        assert events[0]["type"] == "error" and events[0]["code"] == "TLS error"
        assert [e["type"] for e in events] == ["error", "stop"]
    finally:
        s.stop()


def test_expired_cached_token_is_renewed(speech, tmp_path):
    s = Server("--token-validity", "1")
    try:
        wav = speech("stop the music")
        first = demo(s.url, wav, tmp_path)
        assert first.returncode == 0, first.stderr
        time.sleep(1.5)   # the cached token has expired now
        second = demo(s.url, wav, tmp_path)
        assert second.returncode == 0, second.stderr
        assert final_segments(second.stdout)[1][-1]["transcript"] == "stop the music"
    finally:
        s.stop()


def test_unknown_app_id_is_an_auth_error(speech, tmp_path):
    s = Server("--allow-app-id", "someone-else")
    try:
        out = demo(s.url, speech("stop the music"), tmp_path)
        assert out.returncode == 1
        events, _ = final_segments(out.stdout)
        assert events[0]["type"] == "error" and events[0]["code"] == "authentication error"
        assert events[0]["grpc_status"] == 7 and "unknown app id" in events[0]["message"]
    finally:
        s.stop()


def test_speech_through_alsa_capture(server, tmp_path, speech):
    wav = speech("turn off the kitchen lights")
    raw = tmp_path / "mic.raw"
    # Speech, then silence so the server ends the segment; the file plugin then repeats zeros.
    subprocess.run(["sox", "-R", str(wav), "-t", "raw", "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer",
                    str(raw), "pad", "0", "1.5"], check=True)
    conf = tmp_path / "asound.conf"
    conf.write_text('</usr/share/alsa/alsa.conf>\n'
                    f'pcm.testmic {{ type file; slave.pcm "null"; file "/dev/null"; infile "{raw}"; format "raw" }}\n')
    env = dict(os.environ, ALSA_CONFIG_PATH=str(conf))
    p = subprocess.Popen([str(DEMO), "--url", server.url, "--app-id", "e2e", "--mic", "testmic", "--json",
                          "--cache-dir", str(tmp_path / "cache")], stdout=subprocess.PIPE, text=True, env=env)
    lines = []
    deadline = time.monotonic() + 30
    assert p.stdout is not None
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line)
        # The segment's own "final" (its words carry "final" too: a string match stops early).
        update = json.loads(line)
        if update.get("type") == "segment" and update.get("final"):
            break
    p.send_signal(signal.SIGINT)
    rest, _ = p.communicate(timeout=30)
    events, finals = final_segments("".join(lines) + rest)
    assert p.returncode == 0
    assert finals and finals[0]["transcript"] == "turn off the kitchen lights", "".join(lines) + rest
    assert events[-1]["type"] == "stop"


class WatchedFile:
    """A named pipe standing for a file: it records whether anything opened it for reading,
    and then gives the reader `content`. Nothing is polled: a thread waits in open()."""

    def __init__(self, path, content):
        self.path, self.content = path, content
        self.opened = self.ended = False
        os.mkfifo(path)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        with open(self.path, "wb") as w:  # returns when a reader opens the pipe
            if self.ended:
                return
            self.opened = True
            w.write(self.content)

    def close(self):
        self.ended = True
        if self.thread.is_alive():  # nobody opened it: open it ourselves to end the thread
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            self.thread.join(10)
            os.close(fd)


@pytest.fixture(scope="module")
def chain_files(tmp_path_factory):
    """A root CA, an intermediate CA it signed, and a server certificate for localhost that the
    intermediate signed; chain.pem is what a public server sends: the server's certificate,
    the intermediate, and (as some do) the root."""
    d = tmp_path_factory.mktemp("chain")
    def ossl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    (d / "ca.ext").write_text("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "root.key", "-out", "root.pem",
         "-days", "2", "-subj", "/CN=speechclient test root")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "mid.key", "-out", "mid.csr",
         "-subj", "/CN=speechclient test intermediate")
    ossl("x509", "-req", "-in", "mid.csr", "-CA", "root.pem", "-CAkey", "root.key", "-CAcreateserial",
         "-out", "mid.pem", "-days", "2", "-extfile", "ca.ext")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    ossl("x509", "-req", "-in", "server.csr", "-CA", "mid.pem", "-CAkey", "mid.key", "-CAcreateserial",
         "-out", "leaf.pem", "-days", "2", "-extfile", "san.ext")
    (d / "chain.pem").write_bytes(b"".join((d / f).read_bytes() for f in ("leaf.pem", "mid.pem", "root.pem")))
    return d


@pytest.mark.parametrize("chain", ["signed by the root", "through an intermediate"])
@pytest.mark.parametrize("root_in_directory", [True, False])
def test_tls_with_the_system_store_reads_its_ca_file_only_when_the_directory_lacks_the_root(
        speech, tmp_path, tls_files, chain_files, chain, root_in_directory):
    """The system store is a CA file (140 certificates on Debian, 47 ms of CPU to parse) and a
    hashed directory of the same certificates. The library searches the directory first and
    reads the file only when the directory has no issuer (as on Fedora, whose directory is not
    hashed). OpenSSL asks the store first for the leaf's issuer: through an intermediate the
    server sent, that miss must not read the file either. SSL_CERT_FILE here is a named pipe
    that records whether it was opened; it holds the root. SSL_CERT_DIR holds the root under its
    hash, or nothing."""
    if chain == "signed by the root":
        cert, key, root = tls_files / "server.pem", tls_files / "server.key", tls_files / "ca.pem"
    else:
        cert, key, root = chain_files / "chain.pem", chain_files / "server.key", chain_files / "root.pem"
    s = Server("--tls-cert", str(cert), "--tls-key", str(key))
    ca_dir = tmp_path / "certs"
    ca_dir.mkdir()
    if root_in_directory:
        (ca_dir / "test-root.pem").write_bytes(root.read_bytes())
        subprocess.run(["openssl", "rehash", str(ca_dir)], check=True, capture_output=True)
    ca_file = WatchedFile(str(tmp_path / "ca-certificates.crt"), root.read_bytes())
    try:
        port = s.address.rsplit(":", 1)[1]
        wav = speech("play some rock music")
        env = dict(os.environ, SSL_CERT_FILE=ca_file.path, SSL_CERT_DIR=str(ca_dir))
        out = subprocess.run([str(DEMO), "--url", f"grpc+tls://localhost:{port}", "--app-id", "e2e", "--file", str(wav),
                              "--cache-dir", str(tmp_path / "cache"), "--json"],
                             capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        assert final_segments(out.stdout)[1][-1]["transcript"] == "play some rock music"
        assert ca_file.opened == (not root_in_directory)
    finally:
        ca_file.close()
        s.stop()


# Two clients in one process share one TLS context (and so one trust store); the first finds the
# CA file unreadable, the second must read it again rather than keep the failed load.
_TWO_CLIENTS = r"""
import json, os, pathlib, sys
sys.path.insert(0, sys.argv[1])
import speechclient as sc
url, wav, ca_path, root_pem, cache = sys.argv[2:]
for attempt in (1, 2):
    if attempt == 2:  # the file becomes readable: a directory stood in its place
        os.rmdir(ca_path)
        pathlib.Path(ca_path).write_bytes(pathlib.Path(root_pem).read_bytes())
    with sc.Client(url, app_id="e2e", audio=sc.WavFile(wav), cache_dir=cache) as client:
        try:
            client.start()
            updates = list(client.updates(timeout=30))
        except sc.SpeechClientError as e:
            updates = [sc.ErrorEvent(e.code, str(e), None)]
    print(json.dumps({"attempt": attempt,
                      "errors": [(int(u.code), u.message) for u in updates if isinstance(u, sc.ErrorEvent)],
                      "finals": [u.transcript for u in updates if isinstance(u, sc.Segment) and u.final]}))
"""


def test_tls_with_the_system_store_reads_its_ca_file_again_after_a_load_that_failed(speech, tmp_path, tls_files):
    """A CA file that could not be read (here a directory where the file should be; the same
    path as running out of memory or descriptors mid-load) is read again at the next miss, not
    taken as read: a transient failure must not make the process distrust every server for
    good. The directory (SSL_CERT_DIR) is empty, so only the file can hold the root."""
    s = Server("--tls-cert", str(tls_files / "server.pem"), "--tls-key", str(tls_files / "server.key"))
    try:
        port = s.address.rsplit(":", 1)[1]
        ca_dir, ca_path = tmp_path / "certs", tmp_path / "ca-certificates.crt"
        ca_dir.mkdir()
        ca_path.mkdir()
        env = dict(os.environ, SSL_CERT_FILE=str(ca_path), SSL_CERT_DIR=str(ca_dir))
        env.setdefault("SPEECHCLIENT_LIBRARY", str(DEMO.parent / "libspeechclient.so.0"))
        out = subprocess.run([sys.executable, "-c", _TWO_CLIENTS, str(BINDING), f"grpc+tls://localhost:{port}",
                              str(speech("play some rock music")), str(ca_path), str(tls_files / "ca.pem"),
                              str(tmp_path / "cache")], capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        first, second = (json.loads(line) for line in out.stdout.splitlines())
        assert first["finals"] == [] and first["errors"], first  # nothing trusted the server yet
        assert "certificate" in first["errors"][0][1], first
        assert second == {"attempt": 2, "errors": [], "finals": ["play some rock music"]}, second
    finally:
        s.stop()


def test_token_from_another_server_is_replaced_by_a_fresh_login(speech, tmp_path):
    """A cached token that is not expired but that the server rejects (another server's secret:
    a restarted server) costs one fresh login, not an error."""
    wav = speech("stop the music")
    for _ in range(2):
        s = Server()
        try:
            out = demo(s.url, wav, tmp_path)
            assert out.returncode == 0, out.stdout + out.stderr
            assert final_segments(out.stdout)[1][-1]["transcript"] == "stop the music"
        finally:
            s.stop()


def test_tls_with_the_system_store_reads_its_ca_file_when_the_directory_has_an_expired_copy(speech, tmp_path, tls_files):
    """A hashed directory holding an expired copy of a root (same name and key, as left behind
    when a CA is renewed) whose current copy is in the CA file alone: reading both, as
    SSL_CTX_set_default_verify_paths() does, OpenSSL takes the copy that is valid now. The
    library reads the file lazily, only when the directory has no issuer; it took the expired
    copy and failed "certificate has expired". An expired issuer from the directory now reads the
    file too, and verification takes the valid copy."""
    d = tmp_path / "expired"
    d.mkdir()
    subprocess.run(["openssl", "x509", "-in", str(tls_files / "ca.pem"), "-signkey", str(tls_files / "ca.key"),
                    "-days", "-1", "-out", str(d / "old-root.pem")], check=True, capture_output=True)
    subprocess.run(["openssl", "rehash", str(d)], check=True, capture_output=True)
    ca_file = tmp_path / "ca-certificates.crt"
    ca_file.write_bytes((tls_files / "ca.pem").read_bytes())
    s = Server("--tls-cert", str(tls_files / "server.pem"), "--tls-key", str(tls_files / "server.key"))
    try:
        port = s.address.rsplit(":", 1)[1]
        wav = speech("play some rock music")
        env = dict(os.environ, SSL_CERT_FILE=str(ca_file), SSL_CERT_DIR=str(d))
        out = subprocess.run([str(DEMO), "--url", f"grpc+tls://localhost:{port}", "--app-id", "e2e", "--file", str(wav),
                              "--cache-dir", str(tmp_path / "cache"), "--json"],
                             capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        assert final_segments(out.stdout)[1][-1]["transcript"] == "play some rock music"
    finally:
        s.stop()


def test_an_expired_certificate_authority_is_named_as_such(speech, tmp_path, tls_files):
    """The trust store holds only an expired copy of the root (the server's own certificate is
    valid): the error said "the certificate of localhost:PORT has expired", pointing at the
    server. It now names the certificate authority, says it is the trust store's, and when it
    expired."""
    d = tmp_path / "expired"
    d.mkdir()
    subprocess.run(["openssl", "x509", "-in", str(tls_files / "ca.pem"), "-signkey", str(tls_files / "ca.key"),
                    "-days", "-1", "-out", str(d / "old-root.pem")], check=True, capture_output=True)
    subprocess.run(["openssl", "rehash", str(d)], check=True, capture_output=True)
    s = Server("--tls-cert", str(tls_files / "server.pem"), "--tls-key", str(tls_files / "server.key"))
    try:
        port = s.address.rsplit(":", 1)[1]
        env = dict(os.environ, SSL_CERT_FILE=str(tmp_path / "no-such-file.pem"), SSL_CERT_DIR=str(d))
        out = subprocess.run([str(DEMO), "--url", f"grpc+tls://localhost:{port}", "--app-id", "e2e",
                              "--file", str(speech("play some rock music")), "--cache-dir", str(tmp_path / "cache"),
                              "--json", "--reconnect", "0"], capture_output=True, text=True, timeout=60, env=env)
    finally:
        s.stop()
    assert out.returncode != 0
    errors = [json.loads(x) for x in out.stdout.splitlines() if x.startswith('{"type":"error"')]
    assert errors, out.stdout + out.stderr
    message = errors[0]["message"]
    assert errors[0]["code"] == "TLS error", errors
    assert message.startswith("the certificate authority 'speechclient test CA' in the trust store, which the "
                              f"certificate of localhost:{port} chains to, expired on "), message
    assert "ca-certificates" in message, message


def test_tls_finds_the_ca_bundle_where_another_distribution_keeps_it(speech, tmp_path, tls_files):
    """Issue 22: an OpenSSL built elsewhere (once, the copy in the wheel) looks for CAs where its
    build machine keeps them (Debian: /usr/lib/ssl). On a system where that place is empty, the library loads the bundle from the
    paths other distributions use. Made real in a private mount namespace: /usr/lib/ssl is an
    empty directory there, /etc/ssl/certs too, and the test CA is Fedora's bundle
    (/etc/pki/tls/certs/ca-bundle.crt); no --ca-file is given."""
    s = Server("--tls-cert", str(tls_files / "server.pem"), "--tls-key", str(tls_files / "server.key"))
    try:
        port = s.address.rsplit(":", 1)[1]
        wav = speech("play some rock music")
        empty = tmp_path / "empty"
        empty.mkdir()
        script = (f'mount --bind "{empty}" /usr/lib/ssl && mount --bind "{empty}" /etc/ssl/certs && '
                  f'mkdir -p /etc/pki && mount -t tmpfs tmpfs /etc/pki && mkdir -p /etc/pki/tls/certs && '
                  f'cp "{tls_files / "ca.pem"}" /etc/pki/tls/certs/ca-bundle.crt && exec "$@"')
        command = [str(DEMO), "--url", f"grpc+tls://localhost:{port}", "--app-id", "e2e", "--file", str(wav),
                   "--cache-dir", str(tmp_path / "cache"), "--json"]
        # SSL_CERT_FILE / SSL_CERT_DIR are a user's explicit choice, which the library keeps to.
        env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
        ok = subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh", *command],
                            capture_output=True, text=True, timeout=60, env=env)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        _, finals = final_segments(ok.stdout)
        assert finals[-1]["transcript"] == "play some rock music"
    finally:
        s.stop()


def test_a_server_context_limit_below_the_clients_loses_no_words(speech, tmp_path):
    """A Speechly server ends a context by itself at its limit (the reference server: `finished`
    with error context_too_long, 5 minutes by default, 5 s here), while the client's own limit,
    raised by the application (context_limit_ms up to an hour), has not moved the stream yet.
    That `finished` ended the user's context: the rest of the file was never sent (one phrase of
    three heard, and an error). It is now what it is, a stream that ended before its audio did:
    the audio after its last final goes on on a new stream. Each phrase sits between 2.5 s
    pauses, so each server context ends in a pause."""
    import wave
    phrases = ["turn on the kitchen lights", "set a timer for five minutes", "play some jazz music"]
    gap = b"\0\0" * 40000  # 2.5 s
    pcm = gap
    for text in phrases:
        with wave.open(str(speech(text))) as w:
            assert w.getframerate() == 16000 and w.getnchannels() == 1
            pcm += w.readframes(w.getnframes()) + gap
    wav = tmp_path / "three-phrases.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm)
    s = Server("--context-limit", "5")
    try:
        out = demo(s.url, wav, tmp_path, "--context-limit-ms", "60000", "--verbose")
    finally:
        s.stop()
    events, finals = final_segments(out.stdout)
    heard = " ".join(f["transcript"] for f in finals)
    assert heard == " ".join(phrases), (heard, out.stderr[-3000:])
    assert out.returncode == 0 and not [e for e in events if e["type"] == "error"], out.stderr[-3000:]
    assert [e["type"] for e in events].count("start") == 1  # one context for the application
