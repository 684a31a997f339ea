"""The cost of one segment update as the segment grows (issue 23): a server
(Tests/peers/hostile_slu_server.py --scenario Grow) sends segment 0 one new final word per
message, N messages; bench/spc_bench.c --mode updates counts the segment callbacks (reading
nothing) and takes the process's CPU from the start to the N-th. An update that costs what
changed gives the same CPU per update for every N; one that copies the segment grows with N.

N stays under the 64 KiB segment bound (a word "wNNN" counts 4 bytes plus 16). Prints one BENCH
line per N and the ratio of the largest N's cost to the smallest's."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run  # noqa: E402  (the build, the pinning and the process helpers of the main bench)

SIZES = [int(n) for n in os.environ.get("SPC_BENCH_UPDATE_WORDS", "200,800,3000").split(",")]
REPEATS = int(os.environ.get("SPC_BENCH_UPDATE_REPEATS", "3"))


class Grow(run.Process):
    def __init__(self, words):
        self.p = subprocess.Popen(run.pinned([run.PY, os.path.join(ROOT, "Tests", "peers", "hostile_slu_server.py"),
                                              "--scenario", "Grow", "--words", str(words)], run.SERVER_CPU),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server")))
        line = self.p.stdout.readline()
        if not line.startswith("listening on"):
            raise RuntimeError(f"the Grow server did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])


def main():
    run.build_spc_bench()
    per_update = {}
    for n in SIZES:
        best = None
        for _ in range(REPEATS):
            server = Grow(n)
            try:
                r = run.run_client([os.path.join(run.OUT, "spc_bench"), "--url", f"grpc://127.0.0.1:{server.port}",
                                    "--mode", "updates", "--words", str(n),
                                    "--cache-dir", tempfile.mkdtemp(prefix="cache-", dir=run.OUT)], timeout=180)
            finally:
                server.stop()
            if r is None or not r.get("ok"):
                print(f"BENCH update_cost words={n} failed: {r}")
                sys.stdout.flush()
                continue
            if best is None or r["cpu_us_per_update"] < best["cpu_us_per_update"]:
                best = r
        if best is None:
            continue
        per_update[n] = best["cpu_us_per_update"]
        print(f"BENCH update_cost words={n} cpu_us_per_update={best['cpu_us_per_update']:.1f} "
              f"updates={best['updates']} seconds={best['seconds']:.2f} peak_rss_kb={best['peak_rss_kb']} "
              f"(best of {REPEATS})")
        sys.stdout.flush()
    if len(per_update) >= 2:
        lo, hi = min(per_update), max(per_update)
        print(f"BENCH update_cost growth words={lo}->{hi} ratio={per_update[hi] / per_update[lo]:.2f} "
              f"(1.0: flat; {hi / lo:.0f}: proportional to the segment)")


if __name__ == "__main__":
    main()
