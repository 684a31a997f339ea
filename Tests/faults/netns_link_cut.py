"""Runs inside a private network namespace (`unshare -n python netns_link_cut.py ...`, started by
test_link_cut.py): the reference server and a PushAudio client talk over this namespace's own
loopback, and the link is cut (`ip link set lo down`) while the user speaks, then restored.
The kernel then drops the packets instead of closing anything, as a real network outage does.

Prints one JSON object on stdout: what the client delivered, its connection-state events and
log lines with times, and when the link went down and up. The test judges; this only records.

    netns_link_cut.py --outer-netns NS --cut SECONDS [--tcp-retries2 N] [--reconnect A,I,M] WORKDIR
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
import wave

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "Tests" / "e2e"))
sys.path.insert(0, str(ROOT / "bindings" / "python"))
os.environ.setdefault("SPEECHCLIENT_LIBRARY", str(ROOT / "build" / "libspeechclient.so.0"))

import speechclient as sc  # noqa: E402
from speechtools import Server, synthesize  # noqa: E402

PHRASES = ["turn on the kitchen lights", "play some classical music", "stop the music",
           "turn off the bedroom lights"]
RATE = 16000
CHUNK = 3200  # bytes: 100 ms of 16-bit mono at 16 kHz


def in_private_namespace(outer: str) -> bool:
    """True only in a network namespace of our own (not `outer`, the starter's, and holding only
    lo): taking lo down anywhere else would cut the machine's loopback, so the helper refuses."""
    if os.readlink("/proc/self/ns/net") == outer:
        return False
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return [line.split(":")[1].strip() for line in links.splitlines()] == ["lo"]


def ip_link(state: str) -> None:
    subprocess.run(["ip", "link", "set", "lo", state], check=True)


def pcm_of(text: str, path: pathlib.Path) -> bytes:
    synthesize(text, path)
    with wave.open(str(path)) as w:
        return w.readframes(w.getnframes())


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("workdir")
    p.add_argument("--outer-netns", required=True, help="readlink /proc/self/ns/net of the starter")
    p.add_argument("--cut", type=float, required=True, help="seconds the link stays down")
    p.add_argument("--tcp-retries2", type=int,
                   help="this namespace's net.ipv4.tcp_retries2: low values make the kernel give up "
                        "on the stalled connection during the cut, as a long outage would")
    p.add_argument("--reconnect", help="max_attempts,initial_delay_ms,max_delay_ms for the client")
    args = p.parse_args()
    workdir = pathlib.Path(args.workdir)

    if not in_private_namespace(args.outer_netns):
        print(json.dumps({"refused": "not in a private network namespace with only lo"}))
        return 2
    ip_link("up")
    if args.tcp_retries2 is not None:
        pathlib.Path("/proc/sys/net/ipv4/tcp_retries2").write_text(f"{args.tcp_retries2}\n")

    silence = b"\0\0" * RATE
    pcms = [pcm_of(t, workdir / f"p{i}.wav") for i, t in enumerate(PHRASES)]
    offsets, audio = [], b""
    for pcm in pcms:
        offsets.append(len(audio) / 32)  # ms into the context where the phrase starts
        audio += pcm + silence
    # The cut starts in the middle of the second phrase; the user keeps speaking through it, and
    # at least 2 s of audio follow the restored link (so the end of the context needs the link).
    cut_at = (len(pcms[0]) + len(silence) + len(pcms[1]) // 2) / 32000
    audio += b"\0\0" * max(0, int((cut_at + args.cut + 2.0) * RATE) - len(audio) // 2)

    result = {"phrases": PHRASES, "offsets_ms": offsets, "cut_at": cut_at, "cut": args.cut,
              "audio_s": len(audio) / 32000, "states": [], "logs": [], "arrivals": []}
    t0 = time.monotonic()
    now = lambda: round(time.monotonic() - t0, 3)  # noqa: E731

    def on_state(s):
        result["states"].append({"t": now(), "state": s.state.name, "attempt": s.attempt,
                                 "delay_ms": s.delay_ms, "reason": s.reason.message if s.reason else None})

    def on_log(level, message):
        if level <= sc.LogLevel.INFO:
            result["logs"].append({"t": now(), "level": int(level), "message": message})

    def on_segment(seg):
        if seg.final:
            result["arrivals"].append({"t": now(), "segment_id": seg.segment_id})

    server = Server()
    link_down = False
    try:
        kwargs = {}
        if args.reconnect:
            kwargs["reconnect"] = tuple(int(x) for x in args.reconnect.split(","))
        with sc.Client(server.url, app_id="faults", audio=sc.PushAudio(RATE, 1), cache_dir=str(workdir),
                       log_level=sc.LogLevel.INFO, on_state=on_state, on_log=on_log, on_segment=on_segment,
                       **kwargs) as c:
            t0 = time.monotonic()
            c.start()
            for k, off in enumerate(range(0, len(audio), CHUNK)):
                t = k * 0.1
                if not link_down and "down_at" not in result and t >= cut_at:
                    ip_link("down")
                    link_down = True
                    result["down_at"] = now()
                elif link_down and t >= cut_at + args.cut:
                    ip_link("up")
                    link_down = False
                    result["up_at"] = now()
                c.push(audio[off:off + CHUNK])
                time.sleep(max(0.0, t0 + (k + 1) * 0.1 - time.monotonic()))
            result["pushed_at"] = now()
            c.push_end()
            updates = list(c.updates(timeout=60))
            result["done_at"] = now()
    finally:
        if link_down:
            ip_link("up")
        server.stop()

    result["starts"] = [u.context_id for u in updates if isinstance(u, sc.StartEvent)]
    result["stops"] = [u.context_id for u in updates if isinstance(u, sc.StopEvent)]
    result["errors"] = [{"code": u.code.name, "message": u.message} for u in updates if isinstance(u, sc.ErrorEvent)]
    result["finals"] = [{"context_id": u.context_id, "segment_id": u.segment_id, "transcript": u.transcript,
                         "words": [[w.text, w.index, w.start_ms, w.end_ms] for w in u.words]}
                        for u in updates if isinstance(u, sc.Segment) and u.final]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
