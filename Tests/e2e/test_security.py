"""Security defaults seen from outside (issue 9): secrets stay out of logs, the cache is private,
plaintext to a non-loopback host is warned about."""
import os
import pathlib
import stat
import subprocess

import speechclient as sc
from speechtools import DEMO, final_segments


def test_tokens_never_reach_the_logs(server, speech, tmp_path):
    cache = tmp_path / "cache"
    runs = []
    debug = []
    for _ in range(2):  # a fresh login, then the cached token
        out = subprocess.run([str(DEMO), "--url", server.url, "--app-id", "e2e", "--file",
                              str(speech("stop the music")), "--cache-dir", str(cache), "--json", "--verbose"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert final_segments(out.stdout)[1][-1]["transcript"] == "stop the music"
        runs.append(out.stdout + out.stderr)
        debug.append(out.stderr.count("speechclient [debug]"))
    # (NAME.valid-until beside a token holds the server's valid_for_s limit, since 0.9.)
    tokens = [p.read_text().strip() for p in cache.glob("token-*") if not p.name.endswith(".valid-until")]
    assert len(tokens) == 1 and tokens[0].count(".") == 2, "the login token was not cached"
    header, payload, signature = tokens[0].split(".")
    # The check below proves something only if the library really logged its work.
    assert min(debug) >= 5, f"--verbose printed {debug} debug lines"
    for text in runs:
        assert tokens[0] not in text
        assert signature not in text and payload not in text
        assert "bearer" not in text.lower()


def test_cache_directory_and_files_are_private(server, speech, tmp_path):
    cache = tmp_path / "new" / "cache"
    out = subprocess.run([str(DEMO), "--url", server.url, "--app-id", "e2e", "--file", str(speech("stop")),
                          "--cache-dir", str(cache), "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    files = list(cache.iterdir())
    assert {p.name.split("-")[0] for p in files} == {"token", "device"}
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


def test_a_shared_cache_directory_is_refused_with_a_warning(server, speech, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    out = subprocess.run([str(DEMO), "--url", server.url, "--app-id", "e2e", "--file", str(speech("stop")),
                          "--cache-dir", str(shared), "--json", "--verbose"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "writable by other users" in out.stderr
    assert list(shared.iterdir()) == [], "secrets were written to a directory others can write to"


def test_plaintext_to_a_remote_host_is_warned_about(tmp_path):
    logs = []
    with sc.Client("grpc://speech.example.com:50051", app_id="a", audio=sc.PushAudio(16000, 1),
                   cache_dir=str(tmp_path), on_log=lambda level, msg: logs.append(msg)) as client:
        client.wait_idle(1.0)
    assert any("plaintext" in m and "speech.example.com" in m for m in logs), logs
    logs.clear()
    with sc.Client("grpc://127.0.0.1:50051", app_id="a", audio=sc.PushAudio(16000, 1),
                   cache_dir=str(tmp_path), on_log=lambda level, msg: logs.append(msg)) as client:
        client.wait_idle(1.0)
    assert not any("plaintext" in m for m in logs), logs
