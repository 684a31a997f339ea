#!/usr/bin/env python3
"""bench/run.py: libspeechclient against the gRPC clients a user would otherwise pick (issue 6).

Run by `make bench`. One machine, loopback, one sink server (bench/cxx/sink_server.cc, grpc++,
pinned to the last CPU; the clients to the first): builds what it needs, runs every figure,
prints a table, one `BENCH name ours=... peer_grpcio=... peer_cxx=... unit=...` line per figure,
and writes bench/out/{results.json,bench.txt,table.md,latency.png}.

Environment: BENCH_WINDOW (s, default 20), BENCH_WARMUP (s, default 3), BENCH_STREAMS
(default "1,100,1000"), BENCH_REPEAT (default 1: runs per client and N, the median is kept),
BENCH_QUICK=1 (5 s windows, 1 and 100 streams, for development).

Its peers are its point: a missing one (no grpc++, so no C++ peer and no fast sink; no grpcio;
no matplotlib) stops it before anything runs, naming what is missing and how to install it
(scripts/setup-bench.sh, which `make bench` runs first). BENCH_ALLOW_MISSING_PEERS=1 runs without
them anyway: NA rows, the Python reference server as the sink, and the comparison marked
INCOMPLETE in the output. A client run that fails makes it exit 1 after writing its output.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import wave

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
LOCK = "/tmp/spc-build.lock"
PY = sys.executable
CPUS = os.sched_getaffinity(0)
CLIENT_CPU = str(min(CPUS))
SERVER_CPU = str(max(CPUS))


def env_float(name, default):
    return float(os.environ.get(name, default))


QUICK = os.environ.get("BENCH_QUICK") == "1"
WINDOW = env_float("BENCH_WINDOW", 5 if QUICK else 20)
WARMUP = env_float("BENCH_WARMUP", 2 if QUICK else 3)
STREAMS = [int(x) for x in os.environ.get("BENCH_STREAMS", "1,100" if QUICK else "1,100,1000").split(",")]
REPEAT = int(os.environ.get("BENCH_REPEAT", "1"))
COLD_RUNS = 3 if QUICK else 7
FILE_RUNS = 5 if QUICK else 31
# Ours keeps each context's unfinished audio for replay after a reconnection; the peers keep
# none. The sink never finishes a segment, so that buffer only fills: with the default 30 s it
# takes fresh pages (a page fault per chunk, 8-20 % of the CPU at 1,000 streams) for the whole
# window. The paced rows that compare clients run ours with the smallest buffer, 1 s, full within the
# warm-up (the steady state); one run shows the default buffer during its fill.
OURS_REPLAY_MS = 1000
FILE_SECONDS = 60 if QUICK else 240
# Runs without a missing peer (or sink, or plot) instead of failing; the output says INCOMPLETE.
ALLOW_MISSING = os.environ.get("BENCH_ALLOW_MISSING_PEERS") == "1"
INSTALL = ("install them with scripts/setup-bench.sh (what `make bench` runs first; root or sudo), or by hand: "
           "apt-get install libgrpc++-dev libprotobuf-dev protobuf-compiler-grpc; "
           f"{PY} -m pip install matplotlib './server[whisper,riva]'")
# What build() found missing (only with BENCH_ALLOW_MISSING_PEERS=1: else it exits).
MISSING = {}
# Every client run that failed (main() exits 1 when there are any).
FAILED_RUNS = []


def log(*a):
    print("bench:", *a, file=sys.stderr, flush=True)


def locked(cmd):
    """A build command, serialised with the other builds in this tree."""
    return (["flock", LOCK] if shutil.which("flock") else []) + cmd


def pinned(cmd, cpu):
    return (["taskset", "-c", cpu] if shutil.which("taskset") and len(CPUS) > 1 else []) + cmd


# ------------------------------------------------------------------------------------------ build

def build_spc_bench():
    """A private copy of the library and spc_bench linked against it."""
    os.makedirs(OUT, exist_ok=True)
    lib_dir = os.path.join(OUT, "lib")
    os.makedirs(lib_dir, exist_ok=True)
    src = os.path.join(ROOT, "build", "libspeechclient.so.0")
    if not os.path.exists(src):
        subprocess.run(locked(["make", "-C", ROOT, "lib"]), check=True)
    # A private copy: another `make lib` in the tree may replace build/ while the bench runs.
    real = os.path.realpath(src)
    # Copied beside, then renamed: a cp over the file would rewrite it under a process that maps it.
    subprocess.run(locked(["cp", real, os.path.join(lib_dir, "libspeechclient.so.0.tmp")]), check=True)
    os.replace(os.path.join(lib_dir, "libspeechclient.so.0.tmp"), os.path.join(lib_dir, "libspeechclient.so.0"))
    subprocess.run(["ln", "-sf", "libspeechclient.so.0", os.path.join(lib_dir, "libspeechclient.so")], check=True)
    subprocess.run(locked([os.environ.get("CC", "cc"), "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
                           "-I", os.path.join(ROOT, "include"), os.path.join(HERE, "spc_bench.c"),
                           "-L", lib_dir, "-lspeechclient", "-Wl,-rpath," + lib_dir,
                           "-o", os.path.join(OUT, "spc_bench")]), check=True)
    subprocess.run(locked([os.environ.get("CC", "cc"), "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
                           os.path.join(HERE, "launch_at.c"), "-o", os.path.join(OUT, "launch_at")]), check=True)


def build_cxx():
    """bench/build-cxx.sh: the C++ peer and sink. None when built, else why not."""
    r = subprocess.run(locked([os.path.join(HERE, "build-cxx.sh")]), stderr=subprocess.PIPE, text=True)
    sys.stderr.write(r.stderr)
    if r.returncode == 0:
        return None
    if r.returncode == 3:  # its prerequisites: it names them
        why = next((l for l in r.stderr.splitlines() if l.startswith("build-cxx: missing")), r.stderr.strip())
        return why.split(";")[0].replace("build-cxx: ", "")
    return f"bench/build-cxx.sh failed (exit {r.returncode}; its output above)"


def missing_prerequisites(sink_only=False):
    """{"peer_cxx"/"peer_grpcio"/"plot": why} for what is missing; the grpc++ sink goes with the C++ peer."""
    missing = {}
    why = build_cxx()
    if why:
        missing["peer_cxx"] = f"the grpc++ peer and the grpc++ sink (bench/cxx/): {why}"
    if sink_only:
        return missing
    r = subprocess.run([PY, os.path.join(HERE, "grpcio_client.py"), "--help"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server")))
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        missing["peer_grpcio"] = f"the grpcio peer (bench/grpcio_client.py under {PY}): {last}"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        missing["plot"] = f"matplotlib in {sys.prefix} (bench/out/latency.png)"
    return missing


def build(sink_only=False):
    """Builds everything; returns whether the grpc++ peer and sink are there. A missing
    prerequisite ends the bench here (exit 1) unless BENCH_ALLOW_MISSING_PEERS=1."""
    missing = missing_prerequisites(sink_only)
    if missing:
        lines = [f"  - {v}" for v in missing.values()] + [f"  {INSTALL}"]
        if not ALLOW_MISSING:
            log("FAILED: the bench cannot run (nothing was measured), missing:\n" + "\n".join(lines)
                + "\n  (BENCH_ALLOW_MISSING_PEERS=1 runs without them: NA rows, the Python reference server as"
                " the sink, the comparison marked INCOMPLETE)")
            sys.exit(1)
        log("WARNING: BENCH_ALLOW_MISSING_PEERS=1: running without what is missing; the comparison is "
            "INCOMPLETE:\n" + "\n".join(lines))
    MISSING.update(missing)
    build_spc_bench()
    return "peer_cxx" not in missing


# ----------------------------------------------------------------------------------------- server

class Process:
    """A server process started by a bench (`self.p`): its CPU time so far, and its stop."""

    def cpu(self):
        with open(f"/proc/{self.p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(5)
        except subprocess.TimeoutExpired:
            self.p.kill()


class Server(Process):
    def __init__(self, have_cxx, tls=None):
        if have_cxx:
            cmd = [os.path.join(OUT, "cxx", "sink_server"), "--port", "0"]
            if tls:
                cmd += ["--tls-cert", tls[0], "--tls-key", tls[1]]
        else:
            cmd = [PY, "-m", "speechclient_server", "--engine", "sink", "--port", "0", "--workers", "2000"]
            if tls:
                cmd += ["--tls-cert", tls[0], "--tls-key", tls[1]]
        self.p = subprocess.Popen(pinned(cmd, SERVER_CPU), stdout=subprocess.PIPE, text=True,
                                  cwd=os.path.join(ROOT, "server"))
        line = self.p.stdout.readline()
        if not line.startswith("listening on"):
            raise RuntimeError("sink server did not start: " + line)
        self.port = int(line.rsplit(":", 1)[1])


# ---------------------------------------------------------------------------------------- clients

SYSTEM_STORE = "system"  # tls_ca: verify with each client's default trusted CAs, not a CA file


def client_cmd(name, port, mode, tls_ca=None, **kw):
    host = "127.0.0.1"
    if name == "ours":
        url = f"{'grpc+tls' if tls_ca else 'grpc'}://{host}:{port}"
        cmd = [os.path.join(OUT, "spc_bench"), "--url", url, "--mode", mode]
        cmd += ["--cache-dir", kw.pop("cache_dir", tempfile.mkdtemp(prefix="cache-", dir=OUT))]
    elif name == "grpcio":
        cmd = [PY, os.path.join(HERE, "grpcio_client.py"), "--target", f"{host}:{port}", "--mode", mode]
    else:
        cmd = [os.path.join(OUT, "cxx", "grpcxx_client"), "--target", f"{host}:{port}", "--mode", mode]
    if tls_ca == SYSTEM_STORE:
        cmd += [] if name == "ours" else ["--system-roots"] + (["1"] if name == "grpcxx" else [])
    elif tls_ca:
        cmd += ["--ca-file", tls_ca]
    for k, v in kw.items():
        cmd += ["--" + k.replace("_", "-"), str(v)]
    return cmd


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_client(cmd, env=None, timeout=600):
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"), **(env or {}))
    r = subprocess.run(pinned(cmd, CLIENT_CPU), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=e, timeout=timeout, preexec_fn=raise_nofile)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not lines:
        log("client failed:", " ".join(cmd), r.returncode, r.stderr[-2000:])
        opts = dict(zip(cmd, cmd[1:]))
        FAILED_RUNS.append(f"{os.path.basename(cmd[1] if cmd[0] == PY else cmd[0])} --mode {opts.get('--mode')}"
                           + (f" --streams {opts['--streams']}" if "--streams" in opts else "")
                           + f" (exit {r.returncode}{'' if lines else ', no result'})")
        return None
    return json.loads(lines[-1])


def cold_cmd(name, port, tls_ca, env=None, from_exec=False):
    """A cold launch to the first `started`, timed from before the harness forks (its fork with a
    preexec_fn, taskset's exec: 3-4 ms here, the same for every client) or, `from_exec`, from
    just before the client's own exec (bench/launch_at.c)."""
    cmd = client_cmd(name, port, "cold", tls_ca, launch_ns=0)
    if from_exec:
        cmd[cmd.index("--launch-ns") + 1] = "@LAUNCH_NS@"
        cmd = [os.path.join(OUT, "launch_at")] + cmd
    else:
        cmd[cmd.index("--launch-ns") + 1] = str(time.monotonic_ns())
    return run_client(cmd, env=env)


def system_store_with(cert, d):
    """The environment that makes `cert` one of the system's trusted CAs for every client: the
    system bundle plus `cert` (SSL_CERT_FILE; gRPC's GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), and the
    system's hashed directory plus `cert` (SSL_CERT_DIR), as update-ca-certificates keeps them."""
    system_file, system_dir = "/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs"
    bundle, certs = os.path.join(d, "ca-certificates.crt"), os.path.join(d, "certs")
    os.makedirs(certs)
    with open(bundle, "wb") as out:
        for path in (system_file, cert):
            with open(path, "rb") as f:
                out.write(f.read())
    for name in os.listdir(system_dir):
        if name.endswith(".pem"):
            os.symlink(os.path.join(system_dir, name), os.path.join(certs, name))
    shutil.copy(cert, os.path.join(certs, "bench-server.pem"))
    subprocess.run(["openssl", "rehash", certs], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    n = sum(1 for name in os.listdir(certs) if not name.endswith(".pem"))
    return {"SSL_CERT_FILE": bundle, "SSL_CERT_DIR": certs, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": bundle}, n


# ------------------------------------------------------------------------------------------ audio

def make_wav(path, seconds):
    import random
    rnd = random.Random(6)
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        block = bytes(rnd.getrandbits(8) & 0x0f for _ in range(32000))  # quiet noise, 1 s
        for _ in range(seconds):
            w.writeframes(block)


def make_certs(d):
    key, cert = os.path.join(d, "server.key"), os.path.join(d, "server.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


# ------------------------------------------------------------------------------------------- main

def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def steal_ms():
    """CPU time the hypervisor took from this VM so far, all CPUs (/proc/stat's steal, in ms).
    The bursts of late chunks at N=1,000 came in the runs where it took hundreds of ms (the
    threads that had to push were not running, though the guest saw them as running)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) * 1000 // os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0


def main():
    have_cxx = build()
    clients = ["ours"] + (["grpcio"] if "peer_grpcio" not in MISSING else []) + (["grpcxx"] if have_cxx else [])
    for _ in range(30):  # other builds disturb CPU figures: wait (a while) for a quiet machine
        if loadavg() <= 1.0:
            break
        log(f"load average {loadavg():.2f} > 1.0: waiting")
        time.sleep(10)
    results = {"load_start": loadavg(), "window_s": WINDOW, "warmup_s": WARMUP, "paced": {}, "clients": clients,
               "server": "grpc++ sink" if have_cxx else "python sink", "cpus": sorted(CPUS),
               "missing": dict(MISSING)}
    server = Server(have_cxx)
    port = server.port
    try:
        # Paced streams: interleaved clients at each N, so drift in machine load hits all alike.
        for n in STREAMS:
            for rep in range(REPEAT):
                order = clients[rep % len(clients):] + clients[:rep % len(clients)]
                for c in order:
                    lat = os.path.join(OUT, f"lat-{c}-{n}.txt")
                    s0, t0, v0 = server.cpu(), time.monotonic(), steal_ms()
                    # Ours as a many-stream program would run it, like grpc++'s completion queue:
                    # the application's thread reads the network (SPC_IO_APPLICATION, 0.3) and
                    # runs the callbacks of what it read right there (spc_io_dispatch, 0.4).
                    extra = {"io": "dispatch", "replay_ms": OURS_REPLAY_MS} if c == "ours" else {}
                    r = run_client(client_cmd(c, port, "paced", streams=n, warmup=WARMUP, window=WINDOW,
                                              lat_out=lat, **extra), timeout=WINDOW + WARMUP + 300)
                    if r:
                        r["server_cpu_pct"] = 100 * (server.cpu() - s0) / (time.monotonic() - t0)
                        r["load"] = loadavg()
                        r["steal_ms"] = steal_ms() - v0
                        results["paced"].setdefault(f"{c}/{n}", []).append(r)
                        log(f"paced {c} N={n}: cpu {r['cpu_s']:.3f} s/{r['window_s']} s, rss {r['rss_kb']} KB, "
                            f"added p50/p99 {r['added_p50_ms']:.3f}/{r['added_p99_ms']:.3f} ms, late {r['late']}, "
                            f"lag {r['lag_mean_ms']:.3f} ms, server {r['server_cpu_pct']:.0f} % of a core, "
                            f"VM steal {r['steal_ms']} ms")
                if have_cxx:
                    equal_pacing(results, port, n)
        # The same at the largest N with the library's default replay buffer (30 s = 960 KB of
        # audio per stream): the sink never ends a segment, so the buffer fills during the
        # whole window, and this run shows what that costs in memory and CPU.
        n = STREAMS[-1]
        r = run_client(client_cmd("ours", port, "paced", streams=n, warmup=WARMUP, window=WINDOW, io="dispatch"),
                       timeout=WINDOW + WARMUP + 300)
        if r:
            results["paced_default_replay"] = r
            log(f"paced ours N={n} default replay buffer: cpu {r['cpu_s']:.3f} s, rss {r['rss_kb']} KB")
        # Ours with the default SPC_IO_LIBRARY (the network thread reads, then wakes the
        # application): what a program gets without the 0.3 option.
        results["paced_library_io"] = {}
        for n in STREAMS:
            r = run_client(client_cmd("ours", port, "paced", streams=n, warmup=WARMUP, window=WINDOW,
                                      replay_ms=OURS_REPLAY_MS), timeout=WINDOW + WARMUP + 300)
            if r:
                results["paced_library_io"][str(n)] = r
                log(f"paced ours N={n} library I/O: cpu {r['cpu_s']:.3f} s, p99 {r['added_p99_ms']:.3f} ms")
        # Hands-free listening (issue 8): the same N and pacing, every chunk through the VAD and
        # endpointer, no context opened: what listening all day costs per stream.
        n = STREAMS[min(1, len(STREAMS) - 1)]
        r = run_client(client_cmd("ours", port, "paced", streams=n, warmup=WARMUP, window=WINDOW, activation="voice"),
                       timeout=WINDOW + WARMUP + 300)
        if r:
            results["paced_voice"] = r
            log(f"paced ours N={n} hands-free listening: cpu {r['cpu_s']:.3f} s, rss {r['rss_kb']} KB")
        # Cold start, plaintext.
        results["cold"], results["cold_from_exec"] = {}, {}
        for c in clients:
            runs = [cold_cmd(c, port, None) for _ in range(COLD_RUNS)]
            results["cold"][c] = [r["started_ms"] for r in runs if r]
            runs = [cold_cmd(c, port, None, from_exec=True) for _ in range(COLD_RUNS)]
            results["cold_from_exec"][c] = [r["started_ms"] for r in runs if r]
        # File transcription into the sink.
        wav = os.path.join(OUT, "long.wav")
        if not os.path.exists(wav) or os.path.getsize(wav) != 44 + FILE_SECONDS * 32000:
            make_wav(wav, FILE_SECONDS)
        # The clients alternate, run after run: a run takes some 30 ms, and the VM's drift over
        # seconds then falls on each alike. "ours_one_stream" sends the file as the peers do, on
        # one stream: a budget and a replay buffer beyond the file (by default the library moves
        # to a new stream every 878 KiB, and keeps a file at most 30 s ahead of the final words,
        # which this sink never sends).
        one_stream = {"replay_ms": (FILE_SECONDS + 10) * 1000, "stream_budget": 1 << 30}
        results["file"], results["file_cpu"] = {}, {}
        for _ in range(FILE_RUNS):
            for c in clients + ["ours_one_stream"]:
                if c == "ours_one_stream":
                    r = run_client(client_cmd("ours", port, "file", wav=wav, **one_stream))
                else:
                    r = run_client(client_cmd(c, port, "file", wav=wav))
                if r and r.get("ok"):
                    results["file"].setdefault(c, []).append(FILE_SECONDS / r["seconds"])
                    results["file_cpu"].setdefault(c, []).append(r["cpu_s"])
        # The quartiles say how far apart runs of one client are on this VM (about 15 % each side).
        for c, xs in results["file"].items():
            q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
            log(f"file {c}: median {med(xs):.0f} x real time (quartiles {q[0]:.0f}-{q[2]:.0f}) over {len(xs)} runs,"
                f" cpu {med(results['file_cpu'][c]) * 1000:.1f} ms")
        # Idle with the microphone open (ALSA file plugin), and listening to it.
        results["idle"] = idle(port)
    finally:
        server.stop()
    # Cold start with TLS (its own sink server).
    tmp = tempfile.mkdtemp(prefix="tls-", dir=OUT)
    cert, key = make_certs(tmp)
    server = Server(have_cxx, tls=(cert, key))
    try:
        results["cold_tls"], results["cold_tls_from_exec"] = {}, {}
        for c in clients:
            runs = [cold_cmd(c, server.port, cert) for _ in range(COLD_RUNS)]
            results["cold_tls"][c] = [r["started_ms"] for r in runs if r]
            runs = [cold_cmd(c, server.port, cert, from_exec=True) for _ in range(COLD_RUNS)]
            results["cold_tls_from_exec"][c] = [r["started_ms"] for r in runs if r]
        # The same, trusting the system's CAs (as most applications do) with the bench's CA among them.
        env, results["system_store_cas"] = system_store_with(cert, tmp)
        results["cold_tls_system_store"] = {}
        for c in clients:
            runs = [cold_cmd(c, server.port, SYSTEM_STORE, env) for _ in range(COLD_RUNS)]
            results["cold_tls_system_store"][c] = [r["started_ms"] for r in runs if r]
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    lib = os.path.join(OUT, "lib", "libspeechclient.so.0")
    stripped = os.path.join(OUT, "lib", "stripped.so")
    subprocess.run(["strip", "-o", stripped, lib], check=False)
    results["so_bytes"] = os.path.getsize(lib)
    results["so_stripped_bytes"] = os.path.getsize(stripped) if os.path.exists(stripped) else None
    results["load_end"] = loadavg()
    for d in os.listdir(OUT):
        if d.startswith("cache-"):
            shutil.rmtree(os.path.join(OUT, d), ignore_errors=True)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    report(results)
    plot(results)
    if MISSING:
        log("INCOMPLETE (BENCH_ALLOW_MISSING_PEERS=1): ran without " + "; ".join(MISSING.values()))
    if FAILED_RUNS:
        log(f"FAILED: {len(FAILED_RUNS)} client run(s) failed, their figures are missing or NA (output above):\n"
            + "\n".join("  - " + f for f in FAILED_RUNS))
        sys.exit(1)


def equal_pacing(results, port, n):
    """grpc++ and ours handing chunks over equally late, so that they wake up alike.

    grpc++'s timers are coarser than the C harness's (whole milliseconds, rounded twice): it
    hands chunks over later and, with several due at once, wakes up less often, and wake-ups
    are most of the CPU here. So grpc++ runs with its pacing on a 2 ms grid (its lag then no
    longer depends on the phase of its clock), and ours on the grid that gives at most the
    same mean lag: twice grpc++'s measured lag, rounded down to whole spacings between chunks.
    """
    cxx = run_client(client_cmd("grpcxx", port, "paced", streams=n, warmup=WARMUP, window=WINDOW,
                                pace_grid_us=2000), timeout=WINDOW + WARMUP + 300)
    if not cxx or cxx.get("lag_mean_ms", -1) <= 0:
        return
    spacing_us = 100_000 / n
    grid_us = 2000 * cxx["lag_mean_ms"]
    if grid_us >= spacing_us:
        grid_us = spacing_us * int(grid_us / spacing_us)
    ours = run_client(client_cmd("ours", port, "paced", streams=n, warmup=WARMUP, window=WINDOW, io="dispatch",
                                 replay_ms=OURS_REPLAY_MS, pace_grid_us=max(1, int(grid_us))),
                      timeout=WINDOW + WARMUP + 300)
    if not ours:
        return
    results.setdefault("paced_equal", {}).setdefault(str(n), []).append({"grpcxx": cxx, "ours": ours})
    log(f"equal pacing N={n}: cpu ours {ours['cpu_s']:.3f} s (lag {ours['lag_mean_ms']:.3f} ms), "
        f"grpc++ {cxx['cpu_s']:.3f} s (lag {cxx['lag_mean_ms']:.3f} ms)")


def idle(port):
    raw = os.path.join(OUT, "mic.raw")
    with open(raw, "wb") as f:
        f.write(b"\0" * 32000 * 120)  # 2 min of silence: alsa-lib 1.2.8 repeats stale data past the end
    conf = os.path.join(OUT, "asound.conf")
    with open(conf, "w") as f:
        f.write("</usr/share/alsa/alsa.conf>\n"
                f'pcm.benchmic {{ type file; slave.pcm "null"; file "/dev/null"; infile "{raw}"; format "raw" }}\n')
    r = run_client(client_cmd("ours", port, "idle", mic="benchmic", window=WINDOW / 2),
                   env={"ALSA_CONFIG_PATH": conf})
    if r:
        log(f"idle: {r}")
    return r


# ---------------------------------------------------------------------------------------- report

def med(v):
    return statistics.median(v) if v else None


def figures(res):
    """(name, unit, {client: value}, lower_is_better) for every figure."""
    clients = res["clients"]
    f = []
    paced = {k: v for k, v in res["paced"].items()}

    def pick(c, n, key):
        runs = paced.get(f"{c}/{n}")
        return med([r[key] for r in runs]) if runs else None

    for n in STREAMS:
        f.append((f"cpu_s_per_stream_hour_n{n}", "s",
                  {c: (lambda r: None if r is None else r * 3600 / WINDOW / n)(pick(c, n, "cpu_s")) for c in clients}, True))
    for n in STREAMS:
        f.append((f"cpu_pct_of_core_n{n}", "%",
                  {c: (lambda r: None if r is None else 100 * r / WINDOW)(pick(c, n, "cpu_s")) for c in clients}, True))
    for n in STREAMS:
        for p in ("p50", "p99"):
            f.append((f"added_latency_{p}_n{n}", "ms", {c: pick(c, n, f"added_{p}_ms") for c in clients}, True))
    for n in STREAMS:
        f.append((f"late_chunks_n{n}", "chunks", {c: pick(c, n, "late") for c in clients}, True))
    for n in STREAMS:
        # Not the client's doing: time the hypervisor took during the run (warm-up included).
        f.append((f"vm_steal_ms_n{n}", "ms", {c: pick(c, n, "steal_ms") for c in clients}, True))
    for n in STREAMS:
        # Thread wake-ups are most of the client's CPU here (see the README's profile).
        f.append((f"context_switches_per_chunk_n{n}", "switches",
                  {c: (None if pick(c, n, "ctx_switches") is None or not pick(c, n, "chunks")
                       else pick(c, n, "ctx_switches") / pick(c, n, "chunks")) for c in clients}, True))
    for n in STREAMS[1:]:
        base = {c: pick(c, STREAMS[0], "rss_kb") for c in clients}
        f.append((f"rss_per_extra_stream_n{n}", "KB",
                  {c: (None if pick(c, n, "rss_kb") is None or base[c] is None
                       else (pick(c, n, "rss_kb") - base[c]) / (n - STREAMS[0])) for c in clients}, True))
    for n in STREAMS:
        # How late, on average, each client's harness handed a chunk over (its timers' precision).
        f.append((f"pacing_lag_mean_n{n}", "ms", {c: pick(c, n, "lag_mean_ms") for c in clients}, True))
    for n, runs in sorted((res.get("paced_equal") or {}).items(), key=lambda kv: int(kv[0])):
        def eq(key):
            return {c: med([r[c][key] for r in runs]) for c in ("ours", "grpcxx")}
        f.append((f"cpu_s_per_stream_hour_n{n}_equal_pacing", "s",
                  {c: v * 3600 / WINDOW / int(n) for c, v in eq("cpu_s").items()}, True))
        f.append((f"pacing_lag_mean_n{n}_equal_pacing", "ms", eq("lag_mean_ms"), True))
        f.append((f"context_switches_per_chunk_n{n}_equal_pacing", "switches",
                  {c: med([r[c]["ctx_switches"] / r[c]["chunks"] for r in runs if r[c]["chunks"]]) for c in ("ours", "grpcxx")}, True))
    rd = res.get("paced_default_replay")
    b1 = pick("ours", STREAMS[0], "rss_kb")
    if rd and b1 and rd["streams"] > STREAMS[0]:  # (BENCH_STREAMS=1 alone: no extra stream)
        f.append((f"rss_per_extra_stream_n{rd['streams']}_default_replay_filling", "KB",
                  {"ours": (rd["rss_kb"] - b1) / (rd["streams"] - STREAMS[0])}, True))
    if rd:
        f.append((f"cpu_s_per_stream_hour_n{rd['streams']}_default_replay_filling", "s",
                  {"ours": rd["cpu_s"] * 3600 / WINDOW / rd["streams"]}, True))
    for n, r in sorted((res.get("paced_library_io") or {}).items(), key=lambda kv: int(kv[0])):
        f.append((f"cpu_s_per_stream_hour_n{n}_library_io", "s", {"ours": r["cpu_s"] * 3600 / WINDOW / int(n)}, True))
        f.append((f"added_latency_p99_n{n}_library_io", "ms", {"ours": r["added_p99_ms"]}, True))
    rv = res.get("paced_voice")
    if rv:
        f.append((f"hands_free_listening_cpu_s_per_stream_hour_n{rv['streams']}", "s",
                  {"ours": rv["cpu_s"] * 3600 / WINDOW / rv["streams"]}, True))
    f.append(("rss_n1", "KB", {c: pick(c, STREAMS[0], "rss_kb") for c in clients}, True))
    f.append(("cold_start_plaintext", "ms", {c: med(res["cold"].get(c, [])) for c in clients}, True))
    f.append(("cold_start_tls", "ms", {c: med(res["cold_tls"].get(c, [])) for c in clients}, True))
    f.append(("cold_start_from_exec_plaintext", "ms", {c: med(res.get("cold_from_exec", {}).get(c, [])) for c in clients}, True))
    f.append(("cold_start_from_exec_tls", "ms", {c: med(res.get("cold_tls_from_exec", {}).get(c, [])) for c in clients}, True))
    f.append(("cold_start_tls_system_store", "ms",
              {c: med(res.get("cold_tls_system_store", {}).get(c, [])) for c in clients}, True))
    f.append(("file_throughput", "x_realtime", {c: med(res["file"].get(c, [])) for c in clients}, False))
    f.append(("file_cpu_per_file", "ms", {c: 1000 * med(res.get("file_cpu", {}).get(c, [])) for c in clients if res.get("file_cpu", {}).get(c)}, True))
    # Ours on one stream, beside the peers (which always send a file on one).
    one = res["file"].get("ours_one_stream")
    f.append(("file_throughput_one_stream", "x_realtime",
              {"ours": med(one), **{c: med(res["file"].get(c, [])) for c in clients if c != "ours"}} if one else {}, False))
    idle_r = res.get("idle") or {}
    f.append(("idle_mic_open_cpu", "%", {"ours": 100 * idle_r["idle_cpu_s"] / idle_r["idle_window_s"]} if idle_r else {}, True))
    f.append(("mic_listening_cpu", "%", {"ours": 100 * idle_r["listen_cpu_s"] / idle_r["listen_window_s"]} if idle_r else {}, True))
    f.append(("so_stripped_size", "MB", {"ours": (res["so_stripped_bytes"] or res["so_bytes"]) / 1e6}, True))
    return f


PEER_KEY = {"grpcio": "peer_grpcio", "grpcxx": "peer_cxx"}
PEER_TITLE = {"grpcio": "grpcio (Python asyncio)", "grpcxx": "grpc++ (async CQ)"}


def fmt(v):
    if v is None:
        return "NA"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def report(res):
    rows = figures(res)
    peers = [c for c in res["clients"] if c != "ours"]
    lines = []
    for name, unit, vals, _ in rows:
        parts = [f"ours={fmt(vals.get('ours'))}"] + [f"{PEER_KEY[p]}={fmt(vals.get(p))}" for p in ("grpcio", "grpcxx")]
        lines.append(f"BENCH {name} {' '.join(parts)} unit={unit}")
    head = ["figure", "unit", "ours"] + [PEER_TITLE[p] for p in peers] + [f"ours/{p}" for p in peers]
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, unit, vals, _ in rows:
        o = vals.get("ours")
        ratios = [fmt(o / vals[p]) if o is not None and vals.get(p) else "–" for p in peers]
        md.append("| " + " | ".join([name, unit, fmt(o)] + [fmt(vals.get(p)) if p in vals else "–" for p in peers] + ratios) + " |")
    srv = {k: med([r["server_cpu_pct"] for r in v]) for k, v in res["paced"].items()}
    note = (f"\nWindow {res['window_s']:g} s after {res['warmup_s']:g} s warm-up; load average {res['load_start']:.2f} "
            f"at the start, {res['load_end']:.2f} at the end; sink: {res['server']} "
            f"(its CPU, % of a core, per run: " + ", ".join(f"{k} {v:.0f}" for k, v in srv.items()) + ")."
            + (f" cold_start_tls_system_store: no CA file given; the system's {res['system_store_cas']} CAs"
               " plus the bench's are trusted (SSL_CERT_FILE/SSL_CERT_DIR, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)."
               if res.get("system_store_cas") else ""))
    missing = res.get("missing") or {}
    if missing:
        # Said first and last, in every output: these figures are not the comparison.
        warn = ("INCOMPLETE (BENCH_ALLOW_MISSING_PEERS=1): ran without " + "; ".join(missing.values())
                + (". The sink is the Python reference server: it saturates at 1,000 streams, so the latency"
                   " there is the sink's." if "peer_cxx" in missing else "."))
        md = [f"**{warn}**", ""] + md
        note += f"\n\n**{warn}**"
        lines = [f"BENCH INCOMPLETE missing={','.join(sorted(missing))}"] + lines
    text = "\n".join(md) + "\n" + note + "\n"
    with open(os.path.join(OUT, "table.md"), "w") as f:
        f.write(text)
    with open(os.path.join(OUT, "bench.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(text)
    print("\n".join(lines))


def plot(res):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib: no plot")
        return
    fig, axes = plt.subplots(1, len(STREAMS), figsize=(5 * len(STREAMS), 4), squeeze=False)
    for ax, n in zip(axes[0], STREAMS):
        for c in res["clients"]:
            path = os.path.join(OUT, f"lat-{c}-{n}.txt")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                v = sorted(max(float(l.split()[0]) / 1000, 1e-3) for l in f if l.strip())
            if not v:
                continue
            ax.plot(v, [(i + 1) / len(v) for i in range(len(v))], label={"ours": "libspeechclient (C)"}.get(c, PEER_TITLE.get(c, c)))
        ax.set_xscale("log")
        ax.set_xlabel("added latency, ms")
        ax.set_ylabel("fraction of chunks")
        ax.set_title(f"{n} concurrent real-time stream{'s' if n > 1 else ''}")
        ax.axvline(1.0, color="grey", lw=0.5, ls="--")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle("chunk handed over -> its tentative received, minus the sink's own time (CDF)", fontsize=10)
    fig.tight_layout()
    out = os.path.join(OUT, "latency.png")
    fig.savefig(out, dpi=110)
    log("plot:", out)


if __name__ == "__main__":
    main()
