"""bindings/c/examples/poll-loop.c: application delivery from a plain poll() loop, built with cc
against include/ and build/ as the Makefile's `examples` target does, run against the server."""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "bindings" / "c" / "examples" / "poll-loop.c"
BUILD = ROOT / "build"


@pytest.fixture(scope="module")
def poll_loop(tmp_path_factory):
    if not (BUILD / "libspeechclient.so").exists():
        pytest.fail("build/libspeechclient.so is not built: run `make lib` first (`make test-e2e` does)")
    exe = tmp_path_factory.mktemp("poll-loop") / "poll-loop"
    cc = os.environ.get("CC") or shutil.which("cc") or "cc"
    r = subprocess.run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{ROOT / 'include'}",
                        str(SOURCE), f"-L{BUILD}", "-lspeechclient", f"-Wl,-rpath,{BUILD}", "-o", str(exe)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr  # strict C11: any warning fails
    return exe


def run(exe, *args, stdin=subprocess.DEVNULL, timeout=60):
    return subprocess.run([str(exe), *map(str, args)], stdin=stdin, capture_output=True, text=True,
                          timeout=timeout)


def test_poll_loop_transcribes_a_wav_file(poll_loop, server, speech, tmp_path):
    wav = speech("turn on the kitchen lights")
    # stdin at end of input: the loop stops watching it and goes on.
    r = run(poll_loop, "--url", server.url, "--cache-dir", tmp_path / "cache", wav)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["turn on the kitchen lights"]
    events = r.stderr.split()
    assert events[0] == "start" and events[2] == "stop" and events[1] == events[3], r.stderr
    assert "outside" not in r.stderr and "error" not in r.stderr


def test_poll_loop_reads_the_network_itself(poll_loop, server, speech, tmp_path):
    """--io application: the same words, and the loop's own thread did network work."""
    wav = speech("turn on the kitchen lights")
    r = run(poll_loop, "--url", server.url, "--cache-dir", tmp_path / "cache", "--io", "application", wav)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["turn on the kitchen lights"]
    served = [int(line.split()[1]) for line in r.stderr.splitlines() if line.startswith("io: ")]
    assert served and served[0] > 0, r.stderr
    assert "outside" not in r.stderr and "error" not in r.stderr


def test_poll_loop_runs_callbacks_in_its_network_work(poll_loop, server, speech, tmp_path):
    """--io dispatch (spc_io_dispatch): the same words, and segment callbacks ran inside the
    network work, not through the event fd."""
    wav = speech("turn on the kitchen lights")
    r = run(poll_loop, "--url", server.url, "--cache-dir", tmp_path / "cache", "--io", "dispatch", wav)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["turn on the kitchen lights"]
    counts = [line.split() for line in r.stderr.splitlines() if line.startswith("io: ")]
    assert counts and int(counts[0][1]) > 0 and int(counts[0][3]) > 0, r.stderr
    assert "outside" not in r.stderr and "error" not in r.stderr


def test_stdin_is_part_of_the_loop(poll_loop, server, speech, tmp_path):
    wav = speech("turn on the kitchen lights")
    args = [str(poll_loop), "--url", server.url, "--cache-dir", str(tmp_path / "cache"), str(wav)]
    # Open and silent: the loop ends on the stop event, not on stdin.
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        p.wait(timeout=60)  # stdin stays open (communicate() would close it); the output is small
        out, err = p.stdout.read(), p.stderr.read()
    finally:
        p.kill()
        p.stdin.close()
    assert p.returncode == 0, err
    assert out.splitlines() == ["turn on the kitchen lights"] and "stopping" not in err
    # A line: the loop stops the context (the file may have been sent whole already, so what was
    # heard may still be complete), then ends on its stop event.
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate("\n", timeout=60)
    finally:
        p.kill()
    assert p.returncode == 0, err
    lines = err.splitlines()
    assert "stopping" in lines and lines[-1].startswith("stop "), err
    assert all(line in "turn on the kitchen lights" for line in out.splitlines())


def test_poll_loop_errors(poll_loop, speech, tmp_path):
    wav = speech("hello")
    r = run(poll_loop, "--url", "grpc://127.0.0.1:1", "--cache-dir", tmp_path / "cache", wav)
    assert r.returncode == 1
    assert "error: network error" in r.stderr and "stop" in r.stderr
    r = run(poll_loop, "--url", "grpc://127.0.0.1:1", tmp_path / "missing.wav")
    assert r.returncode == 1 and "missing.wav" in r.stderr
    assert run(poll_loop).returncode == 2
    assert run(poll_loop, "--url", "http://x/y", wav).returncode == 2
    assert run(poll_loop, "--timeout-ms", "0", wav).returncode == 2
    assert run(poll_loop, "--io", "kernel", wav).returncode == 2
