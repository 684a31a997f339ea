"""The real-proxy suite's helpers (issue 18): three reference-server replicas sharing one token
secret, Debian's nginx and HAProxy run in the foreground from a temp dir on 127.0.0.1, a long
recording of command phrases, the C demo and the Python binding as clients, and the count of
phrases delivered exactly once, in order."""
import json
import os
import pathlib
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import wave

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "Tests" / "e2e"))
sys.path.insert(0, str(ROOT / "bindings" / "python"))

from speechtools import Server, stop_process, synthesize  # noqa: E402

# What the suite runs: the library and the demo of this tree's build/ unless told otherwise
# (SPEECHCLIENT_LIBRARY is also what the Python binding loads; SPEECHCLIENT_DEMO is the demo,
# which finds the library next to it through its $ORIGIN rpath).
LIBRARY = os.environ.setdefault("SPEECHCLIENT_LIBRARY", str(ROOT / "build" / "libspeechclient.so.0"))
DEMO = pathlib.Path(os.environ.get("SPEECHCLIENT_DEMO", str(ROOT / "build" / "speechclient-demo")))

SECRET = "proxy-suite-shared-secret"   # one --secret for every replica: a login on one is valid on all
SAMPLE_RATE = 16000

# 24 phrases of server/speechclient_server/intents.txt that PocketSphinx recognises every time on
# espeak-ng speech in this recording. Of the 23 the intents give, "set a timer for ten minutes"
# is heard as "two minutes", and "set a timer for one minutes" comes back as "set a timer for
# one" in some runs of a long recording, not in others: both left out. 21 different ones; "stop the music", "what time is it" and "play some jazz music" come
# twice, far apart, so the alignment below has to keep them apart.
PHRASES = [
    "turn on the kitchen lights",
    "play some jazz music",
    "set a timer for five minutes",
    "turn off the bedroom lights",
    "what time is it",
    "turn on the living room lights",
    "play some classical music",
    "set a timer for twenty minutes",
    "turn off the garage lights",
    "stop the music",
    "turn on the bathroom lights",
    "set a timer for three minutes",
    "play some rock music",
    "turn off the kitchen lights",
    "set a timer for fifteen minutes",
    "turn on the garage lights",
    "what time is it",
    "turn off the living room lights",
    "play some pop music",
    "set a timer for two minutes",
    "play some jazz music",
    "turn on the bedroom lights",
    "stop the music",
    "turn off the bathroom lights",
]
assert len(PHRASES) == 24


# ---------------------------------------------------------------------------------------------
# The recording

def pause_after(i: int) -> float:
    """Seconds of silence after phrase i: 1.5, 1.75 or 2.0 (the server ends a segment after 0.6 s)."""
    return 1.5 + 0.25 * (i % 3)


def make_recording(path: pathlib.Path, phrases=PHRASES, gap_after=None, gap_s=0.0):
    """The phrases spoken by espeak-ng, 16 kHz mono PCM16, 0.5 s of silence first and a pause
    after each; with gap_after=k, gap_s seconds of silence after phrase k (0-based) instead.
    Returns (path, seconds). Synthesized at test time into the test's temp dir."""
    work = path.parent / (path.stem + "-phrases")
    work.mkdir(parents=True, exist_ok=True)
    cache = {}
    pcm = bytearray(b"\0\0" * int(SAMPLE_RATE * 0.5))
    for text in phrases:  # speechtools.synthesize runs sox repeatably (-R): the same audio every run
        if text not in cache:
            wav = synthesize(text, work / f"p{len(cache)}.wav")
            with wave.open(str(wav)) as w:
                assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (SAMPLE_RATE, 1, 2)
                cache[text] = w.readframes(w.getnframes())
    for i, text in enumerate(phrases):
        pcm += cache[text]
        pause = gap_s if gap_after == i else pause_after(i)
        pcm += b"\0\0" * int(SAMPLE_RATE * pause)
    shutil.rmtree(work)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(bytes(pcm))
    return path, len(pcm) / 2 / SAMPLE_RATE


def pause_after_phrase(pcm: bytes, k: int) -> int:
    """The byte offset of the middle of the pause after phrase k (0-based) of a make_recording
    PCM: the pauses are the runs of exact zeros of 1 s or more (sox's dither leaves none inside
    the speech)."""
    runs = [(m.start(), m.end()) for m in re.finditer(b"\0{%d,}" % (2 * SAMPLE_RATE), pcm)]
    start, end = runs[k]
    return (start + end) // 4 * 2


def read_pcm(path: pathlib.Path) -> bytes:
    with wave.open(str(path)) as w:
        return w.readframes(w.getnframes())


# ---------------------------------------------------------------------------------------------
# Counting: every phrase exactly once, in order

def _words(text: str):
    return re.findall(r"[a-z']+", text.lower())


def _window_match(phrase, hyp, j):
    """The length of the shortest stretch of hyp from j that starts with the phrase's first word,
    ends with its last and holds all its words in order, allowing up to two words in between
    (a recogniser's insertion); None when there is none."""
    if j >= len(hyp) or hyp[j] != phrase[0]:
        return None
    k, pos = 1, j + 1
    while k < len(phrase) and pos < len(hyp) and pos - j < len(phrase) + 2:
        if hyp[pos] == phrase[k]:
            k += 1
        pos += 1
    return pos - j if k == len(phrase) else None


def count_delivered(transcripts, phrases=PHRASES):
    """Aligns the expected phrases with the words of the final transcripts, in order (a phrase
    matches where its words appear in order, at most two stray words inside it). Returns a dict:
    delivered (phrases matched once, in order, and not found a second time in the words left
    over), missing (indices of phrases not matched), repeated (indices found again), extra (the
    words left over, in order)."""
    hyp = [w for t in transcripts for w in _words(t)]
    ph = [_words(p) for p in phrases]
    m, n = len(ph), len(hyp)
    # best[i][j]: most phrases of ph[i:] matched in hyp[j:].
    best = [[0] * (n + 1) for _ in range(m + 1)]
    for i in range(m - 1, -1, -1):
        for j in range(n, -1, -1):
            b = max(best[i + 1][j], best[i][j + 1] if j < n else 0)
            k = _window_match(ph[i], hyp, j)
            if k is not None:
                b = max(b, 1 + best[i + 1][j + k])
            best[i][j] = b
    matched, used = [], set()
    i = j = 0
    while i < m and j <= n:
        k = _window_match(ph[i], hyp, j)
        if k is not None and best[i][j] == 1 + best[i + 1][j + k]:
            matched.append(i)
            used.update(range(j, j + k))
            i, j = i + 1, j + k
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    leftover = [w for x, w in enumerate(hyp) if x not in used]
    repeated = [i for i in matched if any(_window_match(ph[i], leftover, x) for x in range(len(leftover)))]
    return {
        "delivered": len(matched) - len(repeated),
        "missing": [i for i in range(m) if i not in matched],
        "repeated": repeated,
        "extra": leftover,
    }


def report(scenario: str, result: dict, errors=(), **figures) -> str:
    """Prints the line the figures are collected from (pytest -s, or the captured output of a
    failed test):  PROXY_RESULT scenario=<name> delivered=<n>/24 ..."""
    more = "".join(f" {k}={v}" for k, v in figures.items())
    line = (f"PROXY_RESULT scenario={scenario} delivered={result['delivered']}/{len(PHRASES)}"
            f" repeated={len(result['repeated'])} extra_words={len(result['extra'])}{more}")
    print(line, flush=True)
    for e in errors:
        print(f"PROXY_ERROR scenario={scenario} {e}", flush=True)
    return line


def explain(result: dict, errors=(), log="") -> str:
    """An assertion message: what was missing, repeated or extra, and what the client said."""
    parts = [f"delivered {result['delivered']}/{len(PHRASES)}"]
    if result["missing"]:
        parts.append("missing: " + ", ".join(f"#{i} {PHRASES[i]!r}" for i in result["missing"]))
    if result["repeated"]:
        parts.append("repeated: " + ", ".join(f"#{i} {PHRASES[i]!r}" for i in result["repeated"]))
    if result["extra"]:
        parts.append("extra words: " + " ".join(result["extra"]))
    parts += [f"error: {e}" for e in errors]
    if log:
        parts.append("log tail:\n" + log[-3000:])
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Replicas of the reference server

class Replicas:
    """Three reference servers (PocketSphinx, the bundled grammar) on 127.0.0.1, one --secret.
    kill(i) sends SIGKILL; restart(i) starts replica i again on the same port."""

    def __init__(self, count: int = 3, *extra: str):
        self.extra = extra
        self.servers = []
        try:
            for _ in range(count):
                self.servers.append(self._start(0))
        except BaseException:
            self.stop()
            raise
        self.ports = [int(s.address.rsplit(":", 1)[1]) for s in self.servers]
        self.addresses = [f"127.0.0.1:{p}" for p in self.ports]

    def _start(self, port: int) -> Server:
        s = Server("--port", str(port), "--secret", SECRET, *self.extra)  # the last --port wins
        # Nothing reads the server's pipes after its first line: drain them so it never blocks.
        for stream in (s.proc.stdout, s.proc.stderr):
            threading.Thread(target=lambda f=stream: f.read(), daemon=True).start()
        return s

    def alive(self, i: int) -> bool:
        return self.servers[i].proc.poll() is None

    def kill(self, i: int) -> None:
        self.servers[i].proc.send_signal(signal.SIGKILL)
        self.servers[i].proc.wait()

    def restart(self, i: int, deadline_s: float = 20.0) -> None:
        """A new process on replica i's port (retried while the port is not free yet)."""
        if self.alive(i):
            self.kill(i)
        end = time.monotonic() + deadline_s
        while True:
            try:
                self.servers[i] = self._start(self.ports[i])
                return
            except RuntimeError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)

    def ensure_all_alive(self) -> None:
        for i in range(len(self.servers)):
            if not self.alive(i):
                self.restart(i)

    def pid(self, i: int) -> int:
        return self.servers[i].proc.pid

    def serving(self, baseline=None, window_s: float = 0.3) -> int:
        """The replica receiving the audio now: the one whose accepted connections received the
        most bytes in the next window_s seconds, from `ss`; when none received anything then
        (a file already sent in full), the most since `baseline` (a received_bytes() snapshot)."""
        def per_replica(now, base):
            per = [0] * len(self.ports)
            for key, n in now.items():
                per[self.ports.index(key[0])] += n - base.get(key, 0)
            return per
        first = self.received_bytes()
        time.sleep(window_s)
        recent = per_replica(self.received_bytes(), first)
        if max(recent) <= 0:
            recent = per_replica(first, baseline or {})
        return max(range(len(recent)), key=recent.__getitem__)

    def received_bytes(self) -> dict:
        """{(replica port, peer port): bytes received} of the replicas' established connections."""
        out = subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True, text=True,
                             check=True).stdout
        result, key = {}, None
        for line in out.splitlines():
            if not line.startswith((" ", "\t")):
                key = None
                fields = line.split()
                local, peer = (fields[2], fields[3]) if len(fields) >= 4 else ("", "")
                lport = int(local.rsplit(":", 1)[1]) if ":" in local else -1
                if lport in self.ports:
                    key = (lport, int(peer.rsplit(":", 1)[1]))
            elif key is not None:
                m = re.search(r"bytes_received:(\d+)", line)
                result[key] = int(m.group(1)) if m else 0
        return result

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


# ---------------------------------------------------------------------------------------------
# Proxies, in the foreground from a temp dir

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, what: str, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} does not listen on 127.0.0.1:{port}")


def nginx_http_block(port: int, replicas) -> str:
    """nginx's own gRPC example (nginx.org/en/docs/http/ngx_http_grpc_module.html and the
    "Introducing gRPC Support with NGINX" post): an upstream of the replicas, `listen ... http2`,
    `grpc_pass grpc://upstream`. Everything else at nginx's defaults (client_max_body_size 1m,
    grpc_read_timeout 60s, keepalive_timeout 75s, round robin)."""
    servers = "".join(f"        server {a};\n" for a in replicas)
    return (
        "http {\n"
        "    upstream replicas {\n"
        f"{servers}"
        "    }\n"
        "    server {\n"
        f"        listen 127.0.0.1:{port} http2;\n"
        "        location / {\n"
        "            grpc_pass grpc://replicas;\n"
        "        }\n"
        "    }\n"
        "}\n")


class Nginx:
    """Debian's nginx in the foreground (daemon off) from its own prefix dir: config, pid file,
    logs and temp paths all there, so it needs no root and touches nothing of the system's."""

    def __init__(self, prefix: pathlib.Path, port: int, replicas, extra_http: str = ""):
        """extra_http: directives added to the http block (the keepalive_requests scenario; for
        experiments such as "client_max_body_size 0;")."""
        self.prefix, self.port = prefix, port
        (prefix / "logs").mkdir(parents=True, exist_ok=True)
        (prefix / "conf").mkdir(exist_ok=True)
        self.conf = prefix / "conf" / "nginx.conf"
        self.http = nginx_http_block(port, replicas)
        # Test-only lines around the documented block: foreground, files under the prefix.
        temp = "".join(f"    {d}_temp_path {prefix / ('tmp-' + d)};\n"
                       for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        http = self.http.replace("http {\n", "http {\n" + temp + f"    access_log {prefix / 'logs' / 'access.log'};\n"
                                 + (f"    {extra_http}\n" if extra_http else ""), 1)
        self.conf.write_text(
            "daemon off;\n"
            f"pid {prefix / 'nginx.pid'};\n"
            f"error_log {prefix / 'logs' / 'error.log'} info;\n"
            "events {}\n" + http)
        self.proc = subprocess.Popen(self._cmd(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=lambda: self.proc.stderr.read(), daemon=True).start()
        wait_listening(port, self.proc, "nginx")
        self.url = f"grpc://127.0.0.1:{port}"

    def _cmd(self, *more: str):
        return ["nginx", "-p", str(self.prefix), "-c", str(self.conf), "-e", str(self.prefix / "logs" / "error.log"), *more]

    def signal(self, name: str) -> None:
        """nginx -s reload | quit | stop, through the pid file in the prefix."""
        subprocess.run(self._cmd("-s", name), check=True, capture_output=True, timeout=10)

    def worker_pids(self):
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def error_log(self) -> str:
        try:
            return (self.prefix / "logs" / "error.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        stop_process(self.proc)  # SIGTERM: nginx's fast shutdown


def haproxy_config(port: int, replicas, timeout_server: str = "50s", test_lines: bool = True) -> str:
    """HTTP/2 (cleartext) on both sides, round robin over the replicas with health checks;
    the timeouts of Debian's /etc/haproxy/haproxy.cfg (connect 5 s, client and server 50 s)
    unless told otherwise. test_lines: the global section the tests add (foreground use, logs to
    stdout) instead of Debian's (chroot, user, daemon, syslog)."""
    servers = "".join(f"    server r{i + 1} {a} proto h2 check\n" for i, a in enumerate(replicas))
    glob = ("global\n"
            "    log stdout format raw local0 info\n") if test_lines else ""
    return (
        glob +
        "defaults\n"
        "    log global\n"
        "    mode http\n"
        "    option httplog\n"
        "    option dontlognull\n"
        "    timeout connect 5s\n"
        "    timeout client 50s\n"
        f"    timeout server {timeout_server}\n"
        "\n"
        "frontend grpc\n"
        f"    bind 127.0.0.1:{port} proto h2\n"
        "    default_backend replicas\n"
        "\n"
        "backend replicas\n"
        "    balance roundrobin\n"
        f"{servers}")


class HAProxy:
    """Debian's HAProxy 2.6 in the foreground (-db) with a config file in a temp dir; its log
    lines (one per request, with the termination state) are kept in .log."""

    def __init__(self, workdir: pathlib.Path, port: int, replicas, timeout_server: str = "50s"):
        workdir.mkdir(parents=True, exist_ok=True)
        self.cfg = workdir / "haproxy.cfg"
        self.cfg.write_text(haproxy_config(port, replicas, timeout_server))
        self.port = port
        self.lines = []
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", str(self.cfg)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)

        def pump():
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
        threading.Thread(target=pump, daemon=True).start()
        wait_listening(port, self.proc, "haproxy")
        self.url = f"grpc://127.0.0.1:{port}"

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> None:
        stop_process(self.proc)


# ---------------------------------------------------------------------------------------------
# Clients

class DemoRun:
    def __init__(self):
        self.events, self.finals, self.errors, self.states = [], [], [], []
        self.returncode = None
        self.stderr = ""
        self.elapsed = 0.0
        self.timed_out = False

    @property
    def transcripts(self):
        return [f["transcript"] for f in self.finals]

    def error_texts(self):
        out = [f"{e.get('code')}: {e.get('message')} (grpc_status {e.get('grpc_status')})" for e in self.errors]
        if self.timed_out:
            out.append(f"the demo did not finish within the test's limit ({self.elapsed:.0f} s)")
        elif self.returncode not in (0, None) and not self.errors:
            out.append(f"the demo exited with {self.returncode}: {self.stderr.strip()[-500:]}")
        return out


def run_demo(url: str, wav: pathlib.Path, cache_dir: pathlib.Path, on_final=None, timeout: float = 150.0,
             extra=()) -> DemoRun:
    """The C demo transcribes the file (--file, --json). on_final(count) is called on this thread
    after each final segment arrives (count from 1): the scenarios act there, mid-stream."""
    run = DemoRun()
    cmd = [str(DEMO), "--url", url, "--app-id", "proxies", "--file", str(wav), "--json",
           "--cache-dir", str(cache_dir), *extra]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: "queue.Queue[str | None]" = queue.Queue()

    def pump():
        for line in p.stdout:
            lines.put(line)
        lines.put(None)
    threading.Thread(target=pump, daemon=True).start()
    err_chunks = []
    threading.Thread(target=lambda: err_chunks.append(p.stderr.read()), daemon=True).start()
    end = t0 + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            run.timed_out = True
            p.kill()
            break
        if line is None:
            break
        if not line.strip():
            continue
        e = json.loads(line)
        run.events.append(e)
        if e["type"] == "segment" and e["final"]:
            run.finals.append(e)
            if on_final:
                on_final(len(run.finals))
        elif e["type"] == "error":
            run.errors.append(e)
        elif e["type"] == "state":
            run.states.append(e)
    run.returncode = p.wait()
    run.elapsed = time.monotonic() - t0
    time.sleep(0.05)
    run.stderr = "".join(err_chunks)
    return run


def push_paced(client, pcm: bytes, speed: float = 1.0, on_time=None, chunk_ms: int = 100) -> None:
    """Pushes the PCM in chunk_ms pieces at `speed` times real time (1: real time, as
    Tests/faults/test_reconnect.py's push_realtime). on_time(seconds since the first push) is
    called before each chunk."""
    step = SAMPLE_RATE * 2 * chunk_ms // 1000
    t0 = time.monotonic()
    for k, off in enumerate(range(0, len(pcm), step)):
        if on_time:
            on_time(time.monotonic() - t0)
        client.push(pcm[off:off + step])
        time.sleep(max(0.0, t0 + (k + 1) * chunk_ms / 1000 / speed - time.monotonic()))


class PushRun:
    def __init__(self):
        self.updates, self.logs = [], []
        self.elapsed = 0.0
        self.ended_early = False

    @property
    def finals(self):
        import speechclient as sc
        return [u for u in self.updates if isinstance(u, sc.Segment) and u.final]

    @property
    def transcripts(self):
        return [f.transcript for f in self.finals]

    @property
    def errors(self):
        import speechclient as sc
        return [u for u in self.updates if isinstance(u, sc.ErrorEvent)]

    @property
    def states(self):
        import speechclient as sc
        return [u for u in self.updates if isinstance(u, sc.StateEvent)]

    def error_texts(self):
        return [f"{e.code.name}: {e.message} (grpc_status {e.grpc_status})" for e in self.errors]


def run_push(url: str, pcm, cache_dir: pathlib.Path, speed: float = 1.0, on_time=None,
             timeout: float = 60.0, **client_kw) -> PushRun:
    """The Python binding with PushAudio: one context, the PCM pushed at `speed` times real
    time, then push_end(); every update until the context's stop (each within `timeout` s).
    pcm may also be a list of pieces: bytes are pushed, a number is that many seconds in which
    nothing is pushed (the context stays open)."""
    import speechclient as sc
    run = PushRun()
    t0 = time.monotonic()
    with sc.Client(url, app_id="proxies", audio=sc.PushAudio(SAMPLE_RATE, 1), cache_dir=str(cache_dir),
                   log_level=sc.LogLevel.INFO,
                   on_log=lambda level, message: run.logs.append(f"{time.monotonic() - t0:7.2f} {message}"),
                   **client_kw) as c:
        c.start()
        for piece in ([pcm] if isinstance(pcm, (bytes, bytearray)) else pcm):
            if isinstance(piece, (bytes, bytearray)):
                push_paced(c, piece, speed, on_time)
            else:
                time.sleep(piece)
        try:
            c.push_end()
        except sc.InvalidStateError:  # an error already ended the context (it is in the updates)
            run.ended_early = True
        run.updates = list(c.updates(timeout=timeout))
    run.elapsed = time.monotonic() - t0
    return run
