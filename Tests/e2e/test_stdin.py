"""Audio from standard input (issue 19 item 7): `--file -` in the C demo and the Python CLI,
through spc_options_set_audio_fd, against the real reference server.

A pipe is live audio: a writer streams WAV (with the size placeholder streaming writers put in
the header) or raw PCM at real time, as `arecord ... | speechclient-demo --file -` would. The run
ends at the end of the stream or at Ctrl-C; either way every word heard arrives final."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import wave

import pytest

from speechtools import DEMO, ROOT, final_segments

CLIS = {
    "c": [str(DEMO)],
    "py": [sys.executable, "-m", "speechclient"],
}


def cli_env():
    return dict(os.environ, PYTHONPATH=str(ROOT / "bindings" / "python"))


def wav_stream_header(rate: int, channels: int) -> bytes:
    """A RIFF header as a recorder writing to a pipe leaves it: both sizes 0xFFFFFFFF."""
    fmt = (1).to_bytes(2, "little") + channels.to_bytes(2, "little") + rate.to_bytes(4, "little") \
        + (rate * channels * 2).to_bytes(4, "little") + (channels * 2).to_bytes(2, "little") + (16).to_bytes(2, "little")
    return b"RIFF" + b"\xff\xff\xff\xff" + b"WAVE" + b"fmt " + len(fmt).to_bytes(4, "little") + fmt \
        + b"data" + b"\xff\xff\xff\xff"


def pcm_of(wav_path: pathlib.Path):
    with wave.open(str(wav_path)) as w:
        return w.getframerate(), w.getnchannels(), w.readframes(w.getnframes())


class RealTimeWriter(threading.Thread):
    """Writes `head`, then `pcm` in 20 ms pieces at real time, then (if `close`) closes the pipe."""

    def __init__(self, pipe, head: bytes, pcm: bytes, bytes_per_second: int, close: bool = True):
        super().__init__(daemon=True)
        self.pipe, self.head, self.pcm, self.rate, self.close = pipe, head, pcm, bytes_per_second, close
        self.done = threading.Event()

    def run(self):
        piece = self.rate // 50 // 4 * 4
        began = time.monotonic()
        try:
            self.pipe.write(self.head)
            for i in range(0, len(self.pcm), piece):
                self.pipe.write(self.pcm[i:i + piece])
                self.pipe.flush()
                lag = began + (i + piece) / self.rate - time.monotonic()
                if lag > 0:
                    time.sleep(lag)
        except BrokenPipeError:
            pass
        finally:
            self.done.set()
            if self.close:
                self.pipe.close()


def start_cli(kind, server, tmp_path, *flags):
    return subprocess.Popen([*CLIS[kind], "--url", server.url, "--app-id", "stdin", "--file", "-", "--json",
                             "--cache-dir", str(tmp_path / kind), *flags],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())


@pytest.mark.parametrize("kind", ["c", "py"])
def test_a_wav_stream_on_stdin_at_real_time_is_transcribed_to_its_end(kind, server, speech, tmp_path):
    # 44.1 kHz stereo: the header's format is read from the stream, and converted.
    rate, channels, pcm = pcm_of(speech("turn on the kitchen lights", rate=44100, channels=2))
    proc = start_cli(kind, server, tmp_path)
    writer = RealTimeWriter(proc.stdin, wav_stream_header(rate, channels), pcm + bytes(rate * channels), rate * channels * 2)
    writer.start()
    writer.join(60)
    proc.wait(timeout=60)
    out, err = proc.stdout.read(), proc.stderr.read()
    assert proc.returncode == 0, err.decode()
    events, finals = final_segments(out.decode())
    assert [e["type"] for e in events][0] == "start" and events[-1]["type"] == "stop", events
    assert [f["transcript"] for f in finals] == ["turn on the kitchen lights"], events
    assert all(w["final"] for w in finals[0]["words"])


def test_raw_pcm_on_stdin_is_transcribed(server, speech, tmp_path):
    # (At 8 kHz PocketSphinx hears "turn on" from a file as well: 22.05 kHz stereo instead.)
    rate, channels, pcm = pcm_of(speech("turn off the bedroom lights", rate=22050, channels=2))
    r = subprocess.run([str(DEMO), "--url", server.url, "--app-id", "stdin", "--file", "-", "--raw", "22050,2",
                        "--json", "--cache-dir", str(tmp_path / "c")], input=pcm + bytes(rate * 4), capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    _, finals = final_segments(r.stdout.decode())
    assert [f["transcript"] for f in finals] == ["turn off the bedroom lights"]


@pytest.mark.parametrize("kind", ["c", "py"])
def test_ctrl_c_on_a_pipe_still_open_delivers_every_word_heard(kind, server, speech, tmp_path):
    """The writer spoke, then keeps the pipe open without writing (a recorder paused, a
    silent producer): Ctrl-C stops the context and the words arrive final; nothing hangs on
    the silent pipe."""
    rate, channels, pcm = pcm_of(speech("set a timer for five minutes"))
    proc = start_cli(kind, server, tmp_path)
    writer = RealTimeWriter(proc.stdin, wav_stream_header(rate, channels), pcm + bytes(rate // 2), rate * 2,
                            close=False)
    writer.start()
    assert writer.done.wait(30)
    time.sleep(0.3)  # the stimulus: Ctrl-C while the pipe is open and silent
    proc.send_signal(signal.SIGINT)
    # Waited for with the pipe still open (communicate() would close it: an end of stream).
    proc.wait(timeout=30)
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdin.close()
    assert proc.returncode == 0, err.decode()
    events, finals = final_segments(out.decode())
    assert " ".join(f["transcript"] for f in finals) == "set a timer for five minutes", events
    assert events[-1]["type"] == "stop"


@pytest.mark.parametrize("kind", ["c", "py"])
def test_a_silent_pipe_is_stopped_by_ctrl_c(kind, server, tmp_path):
    proc = start_cli(kind, server, tmp_path)
    # Nothing is ever written; the context is open (its start acknowledged) and waits.
    deadline = time.monotonic() + 20
    line = b""
    while b'"type":"start"' not in line and time.monotonic() < deadline:
        line = proc.stdout.readline()
    assert b'"type":"start"' in line
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=10)
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdin.close()
    assert proc.returncode == 0, err.decode()
    assert json.loads(out.decode().splitlines()[-1])["type"] == "stop"


@pytest.mark.parametrize("stream, why", [
    (b"ID3\x03\x00\x00\x00\x00\x00\x00\x00\x00" + bytes(100), "an MP3 file (with an ID3 tag), not WAV"),
    (b"", "the stream ended before any audio (empty)"),
    (wav_stream_header(16000, 1)[:30], "the stream ended inside the WAV header, after 30 bytes"),
])
def test_what_is_not_a_wav_stream_is_named(stream, why, server, tmp_path):
    r = subprocess.run([str(DEMO), "--url", server.url, "--app-id", "stdin", "--file", "-", "--json",
                        "--cache-dir", str(tmp_path / "c")], input=stream, capture_output=True, timeout=30)
    assert r.returncode == 1
    errors = [json.loads(l) for l in r.stdout.decode().splitlines() if '"type":"error"' in l]
    assert [e["code"] for e in errors] == ["audio error"], r.stdout
    assert errors[0]["message"].startswith(f"WAV stream (standard input): {why}"), errors
