"""Shared by the end-to-end suites: the real reference server on loopback, synthesized speech,
and the demo's JSON lines."""
import contextlib
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The demo a run is about, as in Tests/proxies: SPEECHCLIENT_DEMO when set (a comparison with
# another build runs its demo, not this tree's), else this tree's.
DEMO = pathlib.Path(os.environ.get("SPEECHCLIENT_DEMO", str(ROOT / "build" / "speechclient-demo")))


def synthesize(text: str, path: pathlib.Path, rate: int = 16000, channels: int = 1) -> pathlib.Path:
    """espeak-ng speech converted by sox to PCM16 WAV at the given rate and channel count. sox -R:
    its dither otherwise takes a new random seed each run, so each run would hear other audio."""
    raw = path.with_suffix(".espeak.wav")
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(raw), text], check=True)
    subprocess.run(["sox", "-R", str(raw), "-r", str(rate), "-c", str(channels), "-b", "16",
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
        stop_process(self.proc)


@contextlib.contextmanager
def hostile_server(scenario: str):
    """Tests/peers/hostile_slu_server.py playing `scenario`; yields its grpc:// URL, and stops it
    (closing its stdin, then killing it) when the block ends."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "Tests" / "peers" / "hostile_slu_server.py"),
                             "--scenario", scenario], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env={"PYTHONPATH": str(ROOT / "server"), "PATH": "/usr/bin:/bin"})
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("listening on "), line
        yield "grpc://" + line.split()[-1]
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.kill()
        proc.wait()


def coloured_noise(n, colour, rng):
    """n samples of unit-RMS noise: "white"; "pink" (power falling 3 dB per octave, like most
    room and fan noise); "brown" (6 dB per octave: rumble, traffic, a car); "hum" (mains hum,
    50 Hz and its harmonics, with a little white noise under it)."""
    import numpy as np
    if colour == "white":
        x = rng.normal(0, 1, n)
    elif colour in ("pink", "brown"):
        spectrum = np.fft.rfft(rng.normal(0, 1, n))
        f = np.fft.rfftfreq(n, 1 / 16000)
        f[0] = f[1]
        spectrum /= np.sqrt(f) if colour == "pink" else f
        x = np.fft.irfft(spectrum, n)
    elif colour == "hum":
        t = np.arange(n) / 16000
        x = sum(np.sin(2 * np.pi * 50 * k * t + k) / k for k in (1, 2, 3, 5)) + rng.normal(0, 0.05, n)
    else:
        raise ValueError(colour)
    return x / np.sqrt((x ** 2).mean())


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it is still there after 10 s; waits for it either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def final_segments(stdout: str):
    import json
    # State lines ({"type":"state"}) are left out: readers ignore types they do not check.
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    events = [e for e in events if e["type"] != "state"]
    return events, [e for e in events if e["type"] == "segment" and e["final"]]


def word_errors(ref, hyp):
    """Word-level edit distance (substitutions, insertions, deletions) between two word lists."""
    d = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(hyp)]
