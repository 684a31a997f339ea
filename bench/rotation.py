#!/usr/bin/env python3
"""What moving a context to a fresh HTTP/2 stream costs (issue 18), printed as BENCH lines.

1. Throughput and CPU: a 240 s WAV file through the demo into the sink server, with the default
   stream budget (a new stream every 14-28 s of audio, at a pause) against a budget so large that
   the file stays on one stream; both with a 10-minute replay buffer so that only the rotation
   differs. Interleaved runs, medians; the difference divided by the number of rotations.
2. Latency at the seam: speech pushed at real time to the PocketSphinx reference server, with a
   64 KiB budget (a new stream every few seconds) and with an unbounded one; for every final
   segment, the time from the end of its audio to its arrival. A segment whose audio follows a
   rotation waits for the previous stream's last results, so this is where a cost would show.

Usage: .venv/bin/python bench/rotation.py [--runs N]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import wave

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "Tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
os.environ.setdefault("SPEECHCLIENT_LIBRARY", os.path.join(ROOT, "build", "libspeechclient.so.0"))
import speechclient as sc  # noqa: E402
from speechtools import Server, synthesize  # noqa: E402

DEMO = os.path.join(ROOT, "build", "speechclient-demo")
UNBOUNDED = 1073741824


def speechlike_wav(path, seconds):
    """Loud noise in 3 s bursts with 0.4 s of silence between them (pauses to rotate at)."""
    import random
    rnd = random.Random(7)
    loud = bytes(b for _ in range(16000) for b in int(rnd.randint(-6000, 6000)).to_bytes(2, "little", signed=True))
    with wave.open(path, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        t = 0.0
        while t < seconds:
            w.writeframes(loud * 3)
            w.writeframes(b"\0\0" * 6400)
            t += 3.4


def file_run(url, wav, budget):
    cmd = [DEMO, "--url", url, "--file", wav, "--json", "--verbose", "--replay-buffer-ms", "600000",
           "--context-limit-ms", "3600000", "--stream-budget", str(budget)]
    t0 = time.monotonic()
    before = os.times()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    after = os.times()
    wall = time.monotonic() - t0
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    rotations = p.stderr.count("continues on a new stream")
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return wall, cpu, rotations


def seam_run(url, pcm, budget, tmp):
    arrivals = []
    t0 = [0.0]

    def on_segment(s):
        if s.final and s.words:
            arrivals.append((time.monotonic() - t0[0], s.words[-1].end_ms / 1000, s.transcript))

    logs = []
    with sc.Client(url, app_id="bench", audio=sc.PushAudio(16000, 1), cache_dir=tmp, stream_budget=budget,
                   log_level=sc.LogLevel.INFO, on_log=lambda lvl, m: logs.append(m), on_segment=on_segment) as c:
        c.start()
        t0[0] = time.monotonic()
        for k, off in enumerate(range(0, len(pcm), 3200)):
            c.push(pcm[off:off + 3200])
            time.sleep(max(0.0, t0[0] + (k + 1) * 0.1 - time.monotonic()))
        c.push_end()
        assert c.wait_idle(60)
    lat = [a - end for a, end, _ in arrivals]
    return lat, sum("continues on a new stream" in m for m in logs), len(arrivals)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rotation-")
    sink = Server("--engine", "sink")
    try:
        wav = os.path.join(tmp, "speechlike.wav")
        speechlike_wav(wav, 240)
        res = {900000: [], UNBOUNDED: []}
        for _ in range(args.runs):
            for budget in res:
                res[budget].append(file_run(sink.url, wav, budget))
        rot = statistics.median(r[2] for r in res[900000])
        for budget, runs in res.items():
            name = "default" if budget == 900000 else "unbounded"
            print(f"BENCH rotation_file budget={name} wall_s={statistics.median(r[0] for r in runs):.3f} "
                  f"cpu_s={statistics.median(r[1] for r in runs):.3f} rotations={statistics.median(r[2] for r in runs):.0f} "
                  f"x_realtime={240 / statistics.median(r[0] for r in runs):.0f}")
        d_cpu = statistics.median(r[1] for r in res[900000]) - statistics.median(r[1] for r in res[UNBOUNDED])
        d_wall = statistics.median(r[0] for r in res[900000]) - statistics.median(r[0] for r in res[UNBOUNDED])
        print(f"BENCH rotation_cost per_rotation_cpu_ms={1000 * d_cpu / max(rot, 1):.2f} "
              f"per_rotation_wall_ms={1000 * d_wall / max(rot, 1):.2f} (differences of medians; noise is of the same order)")
    finally:
        sink.stop()
    server = Server()
    try:
        phrases = ["turn on the kitchen lights", "play some jazz music", "what time is it", "stop the music",
                   "turn off the bedroom lights", "set a timer for five minutes"]
        pcm = b""
        for i, p in enumerate(phrases * 3):
            path = os.path.join(tmp, f"p{i % len(phrases)}.wav")
            if not os.path.exists(path):
                synthesize(p, __import__("pathlib").Path(path))
            with wave.open(path) as w:
                pcm += w.readframes(w.getnframes()) + b"\0\0" * 16000
        for budget, name in ((65536, "64KiB"), (UNBOUNDED, "unbounded")):
            lat, rotations, finals = seam_run(server.url, pcm, budget, tmp)
            lat.sort()
            print(f"BENCH rotation_seam budget={name} rotations={rotations} finals={finals} "
                  f"final_latency_ms_median={1000 * statistics.median(lat):.0f} "
                  f"p90={1000 * lat[int(0.9 * (len(lat) - 1))]:.0f} max={1000 * lat[-1]:.0f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
