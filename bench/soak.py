#!/usr/bin/env python3
"""Soak (issue 9): 200 concurrent real-time streams for 10 minutes against the sink server, the
client's RSS sampled every few seconds, and the slope of RSS over time after the warm-up.

    make soak                    (SOAK_STREAMS, SOAK_SECONDS, SOAK_SAMPLE: 200, 600, 5 by default;
                                  SOAK_IO=application|dispatch: the clients use SPC_IO_APPLICATION,
                                  served with spc_io_process or spc_io_dispatch;
                                  SOAK_STREAM_BUDGET: bytes per stream before it moves to a new
                                  one, 65536 by default, 0 for the library's 900,000)

Each context moves to a new stream every ~2 s (the smallest stream budget) instead of every ~28 s:
whatever a finished stream leaves behind shows in minutes (0.11.0 kept ~0.8 KB of every one).

It uses what `make bench` builds (bench/out/spc_bench and the grpc++ sink; scripts/setup-bench.sh,
which `make soak` runs first, installs grpc++). Without grpc++ it stops, naming what is missing
(BENCH_ALLOW_MISSING_PEERS=1: the Python reference server's sink instead, said in the output).
The client runs with the library's defaults (30 s replay buffer: RSS grows for the first 30 s
while the buffers fill, so the slope is fitted after 60 s). Prints the samples, then
`BENCH soak_rss_slope ours=KB_PER_MIN unit=KB/min` and the RSS range.
"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
sys.path.insert(0, HERE)

import run  # noqa: E402  (the bench's build and server helpers)

STREAMS = int(os.environ.get("SOAK_STREAMS", "200"))
SECONDS = float(os.environ.get("SOAK_SECONDS", "600"))
SAMPLE = float(os.environ.get("SOAK_SAMPLE", "5"))
IO = os.environ.get("SOAK_IO", "library")  # spc_bench --io
BUDGET = int(os.environ.get("SOAK_STREAM_BUDGET", "65536"))  # spc_bench --stream-budget
FIT_AFTER = min(60.0, SECONDS / 3)


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def slope(points):
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(r for _, r in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return sum((t - mx) * (r - my) for t, r in points) / var if var else 0.0


def main():
    have_cxx = run.build(sink_only=True)
    server = run.Server(have_cxx)
    try:
        cmd = [os.path.join(OUT, "spc_bench"), "--url", f"grpc://127.0.0.1:{server.port}", "--mode", "paced",
               "--streams", str(STREAMS), "--warmup", "2", "--window", str(SECONDS),
               "--cache-dir", os.path.join(OUT, "soak-cache"), "--keep-samples", "0"]
        if IO != "library":
            cmd += ["--io", IO]
        if BUDGET:
            cmd += ["--stream-budget", str(BUDGET)]
        client = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        samples = []
        while client.poll() is None:
            time.sleep(SAMPLE)
            r = rss_kb(client.pid)
            if r is not None:
                samples.append((time.monotonic() - t0, r))
                print(f"soak: t={samples[-1][0]:6.0f} s  rss={r} KB", flush=True)
        out, err = client.communicate()
        if client.returncode != 0:
            print(err, file=sys.stderr)
            raise SystemExit(f"soak: the client failed ({client.returncode})")
        fit = [(t, r) for t, r in samples if t >= FIT_AFTER]
        kb_per_min = slope(fit) * 60 if len(fit) >= 3 else float("nan")
        lo, hi = min(r for _, r in fit), max(r for _, r in fit)
        print(f"soak: {STREAMS} streams for {SECONDS:.0f} s, stream budget {BUDGET or 'the default'}; RSS after {FIT_AFTER:.0f} s from {lo} to {hi} KB; "
              f"fitted slope {kb_per_min:+.1f} KB/min; client: {out.strip()}")
        half = [(t, r) for t, r in samples if t >= SECONDS / 2]
        late = slope(half) * 60 if len(half) >= 3 else float("nan")
        print(f"soak: slope over the second half ({SECONDS / 2:.0f}-{SECONDS:.0f} s): {late:+.1f} KB/min")
        print(f"BENCH soak_rss_slope ours={kb_per_min:.2f} unit=KB/min")
        print(f"BENCH soak_rss_slope_second_half ours={late:.2f} unit=KB/min")
        print(f"BENCH soak_rss_range ours={lo}-{hi} unit=KB")
        if not have_cxx:
            print("soak: INCOMPLETE (BENCH_ALLOW_MISSING_PEERS=1): the sink was the Python reference server, not "
                  "the grpc++ one: " + "; ".join(run.MISSING.values()))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
