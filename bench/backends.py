"""CPU per stream-hour of the library by backend (issue 20): the same paced C clients
(bench/spc_bench.c: N streams, 100 ms chunks at real time, one process) against a server that
recognises nothing for each protocol, so the figure is the client's own cost:

- speechly: the reference server's SLU/Stream with the sink engine (one empty tentative per chunk);
- riva: the reference server's Riva StreamingRecognize with the sink engine (nothing sent back);
- wyoming: the scripted Wyoming server (Tests/peers/wyoming_fault_server.py, "Normal": one
  transcript per audio-stop). A Wyoming context is one connection; the client's stream rotation
  ends each at its byte budget (no pause in the bench's audio) and opens the next.

Prints one BENCH line per backend and stream count, with the server's CPU beside it."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run  # noqa: E402  (the build, the pinning and the process helpers of the main bench)

WINDOW = run.env_float("SPC_BENCH_BACKEND_WINDOW", 30.0)
STREAMS = [int(n) for n in os.environ.get("SPC_BENCH_BACKEND_STREAMS", "1,20").split(",")]


class Peer(run.Process):
    def __init__(self, cmd, cwd):
        self.p = subprocess.Popen(run.pinned(cmd, run.SERVER_CPU), stdout=subprocess.PIPE, text=True, cwd=cwd)
        line = self.p.stdout.readline()
        if not line.startswith("listening on"):
            raise RuntimeError(f"{cmd[:4]} did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])


def peers():
    py, server = run.PY, os.path.join(ROOT, "server")
    return {
        "speechly": (lambda: Peer([py, "-m", "speechclient_server", "--engine", "sink", "--port", "0",
                                   "--workers", "200"], server), "grpc"),
        "riva": (lambda: Peer([py, "-m", "speechclient_server", "--protocol", "riva", "--engine", "sink",
                               "--port", "0", "--workers", "200"], server), "riva"),
        "wyoming": (lambda: Peer([py, os.path.join(ROOT, "Tests", "peers", "wyoming_fault_server.py"),
                                  "--scenario", "Normal", "--port", "0"], ROOT), "wyoming"),
    }


def main():
    run.build_spc_bench()
    for name, (start, scheme) in peers().items():
        for n in STREAMS:
            peer = start()
            try:
                cmd = [os.path.join(run.OUT, "spc_bench"), "--url", f"{scheme}://127.0.0.1:{peer.port}",
                       "--mode", "paced", "--streams", str(n), "--warmup", "3", "--window", str(WINDOW),
                       "--thread-delivery", "1", "--cache-dir", tempfile.mkdtemp(prefix="cache-", dir=run.OUT)]
                c0 = peer.cpu()
                r = run.run_client(cmd, timeout=WINDOW * 4 + 120)
                server_cpu = peer.cpu() - c0
            finally:
                peer.stop()
            if r is None:
                print(f"BENCH backend_cpu backend={name} streams={n} failed")
                continue
            per_hour = r["cpu_s"] * 3600 / r["window_s"] / n
            print(f"BENCH backend_cpu backend={name} streams={n} cpu_s_per_stream_hour={per_hour:.1f} "
                  f"rss_kb={r.get('rss_kb', 0)} server_cpu_s={server_cpu:.1f} (window {r['window_s']:.0f} s, "
                  f"warm-up included for the server)")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
