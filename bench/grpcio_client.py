"""grpcio_client: the grpcio (Python, asyncio) peer of bench/spc_bench.c; same modes and JSON.

N bidirectional SLU/Stream calls on one grpc.aio channel in one event loop: per stream one
coroutine that paces the audio (absolute time.monotonic schedule, phases spread over 100 ms;
one prebuilt request object reused for every chunk) and one that reads. Latency: just before
`await call.write()` of a chunk -> `await call.read()` returning its tentative, minus the server's
own time carried in the tentative's word.
"""
from __future__ import annotations

import argparse
import array
import asyncio
import collections
import json
import resource
import sys
import time

import grpc

from speechclient_server._proto.speechly.identity.v2 import identity_pb2 as idp, identity_pb2_grpc
from speechclient_server._proto.speechly.slu.v1 import slu_pb2 as slu, slu_pb2_grpc

PERIOD = 100_000_000


def cpu_s() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def ctx_switches() -> int:
    """Context switches of the whole process (all threads), voluntary and not."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_nvcsw + u.ru_nivcsw


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


class State:
    def __init__(self):
        self.measuring = False
        self.added = array.array("q")  # the window's latency samples, the first `n` of them
        self.raw = array.array("q")
        self.n = 0
        self.tentatives = self.unmatched = self.late = self.errors = 0
        self.first_started = 0
        self.started = 0


async def main(a) -> None:
    st = State()
    creds = None
    if a.ca_file:
        with open(a.ca_file, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    elif a.system_roots:  # gRPC's default roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH when set)
        creds = grpc.ssl_channel_credentials()
    channel = grpc.aio.secure_channel(a.target, creds) if creds else grpc.aio.insecure_channel(a.target)
    login = await identity_pb2_grpc.IdentityAPIStub(channel).Login(idp.LoginRequest(
        device_id="00000000-0000-4000-8000-000000000003", application=idp.ApplicationScope(app_id="bench")))
    metadata = (("authorization", "Bearer " + login.token),)
    stub = slu_pb2_grpc.SLUStub(channel)
    config = slu.SLURequest(config=slu.SLUConfig(channels=1, sample_rate_hertz=16000, language_code="en-US"))
    start = slu.SLURequest(start=slu.SLUStart())
    stop = slu.SLURequest(stop=slu.SLUStop())
    n = a.streams if a.mode == "paced" else 1
    all_started = asyncio.Event()

    async def open_stream():
        call = stub.Stream(metadata=metadata)
        await call.write(config)
        await call.write(start)
        r = await call.read()
        assert r.WhichOneof("streaming_response") == "started", r
        if not st.first_started:
            st.first_started = time.monotonic_ns()
        st.started += 1
        if st.started == n:
            all_started.set()
        return call

    async def reader(call, sent: collections.deque):
        while True:
            r = await call.read()
            if r is grpc.aio.EOF:
                return
            kind = r.WhichOneof("streaming_response")
            if kind == "tentative_transcript":
                t = time.monotonic_ns()
                st.tentatives += 1
                if not sent:
                    st.unmatched += 1
                    continue
                s = sent.popleft()
                if st.measuring:
                    words = r.tentative_transcript.tentative_words
                    server = int(words[0].word) if words else 0
                    if st.n < len(st.raw):
                        st.raw[st.n], st.added[st.n] = t - s, t - s - server
                        st.n += 1
            elif kind == "finished":
                await call.done_writing()

    if a.mode == "cold":
        await open_stream()
        print(json.dumps({"client": "grpcio", "mode": "cold", "ok": 1,
                          "started_ms": (st.first_started - a.launch_ns) / 1e6}), flush=True)
        return

    if a.mode == "file":
        # The clock starts where spc_bench's does (spc_client_start on a client connected and
        # logged in): before the file is opened and the stream too. The audio follows config and
        # start without waiting for `started`, as the library sends it; the file is read as it
        # is sent.
        t0 = time.monotonic_ns()
        c0 = cpu_s()
        call = stub.Stream(metadata=metadata)
        sent = collections.deque()
        rd = asyncio.ensure_future(reader(call, sent))
        await call.write(config)
        await call.write(start)
        with open(a.wav, "rb") as f:
            f.seek(44)
            while chunk := f.read(3200):
                sent.append(time.monotonic_ns())
                await call.write(slu.SLURequest(audio=chunk))   # returns when flow control took it
        await call.write(stop)
        await rd
        print(json.dumps({"client": "grpcio", "mode": "file", "seconds": (time.monotonic_ns() - t0) / 1e9,
                          "cpu_s": cpu_s() - c0, "tentatives": st.tentatives, "ok": 1}), flush=True)
        return

    # The window's latency samples, reserved and written before the window so that the RSS can
    # leave them out (as spc_bench does): appended as they came they grew with the window.
    cap = n * int((a.warmup + a.window + 1) * 1e9 / PERIOD)
    st.raw, st.added = array.array("q", bytes(8 * cap)), array.array("q", bytes(8 * cap))
    samples_kb = 2 * 8 * cap // 1024
    calls = await asyncio.gather(*(open_stream() for _ in range(n)))
    await all_started.wait()
    audio = slu.SLURequest(audio=b"\x01" * 3200)
    t0 = time.monotonic_ns() + 20_000_000
    win_start = t0 + int(a.warmup * 1e9)
    win_end = win_start + int(a.window * 1e9)
    counters = {"chunks": 0, "lag_ns": 0}  # lag: how late each chunk was written, summed

    async def writer(i, call, sent):
        due = t0 + PERIOD * i // n
        while due < win_end:
            now = time.monotonic_ns()
            if due > now:
                await asyncio.sleep((due - now) / 1e9)
                now = time.monotonic_ns()
            if st.measuring:
                counters["chunks"] += 1
                counters["lag_ns"] += now - due
                if now - due > 10_000_000:
                    st.late += 1
            sent.append(time.monotonic_ns())
            await call.write(audio)
            due += PERIOD

    async def window():
        await asyncio.sleep(max(0, win_start - time.monotonic_ns()) / 1e9)
        c0, x0 = cpu_s(), ctx_switches()
        st.measuring = True
        await asyncio.sleep(max(0, win_end - time.monotonic_ns()) / 1e9)
        st.measuring = False
        return cpu_s() - c0, ctx_switches() - x0, rss_kb() - samples_kb

    sents = [collections.deque() for _ in range(n)]
    readers = [asyncio.ensure_future(reader(c, s)) for c, s in zip(calls, sents)]
    win = asyncio.ensure_future(window())
    await asyncio.gather(*(writer(i, c, s) for i, (c, s) in enumerate(zip(calls, sents))))
    cpu, ctx, rss = await win
    for c in calls:
        await c.write(stop)
    await asyncio.wait_for(asyncio.gather(*readers, return_exceptions=True), 20)
    await channel.close()
    if a.lat_out:
        with open(a.lat_out, "w") as f:
            f.writelines(f"{x / 1e3:.1f} {y / 1e3:.1f}\n" for x, y in zip(st.added[:st.n], st.raw[:st.n]))
    added, raw = sorted(st.added[:st.n]), sorted(st.raw[:st.n])

    def pct(v, p):
        return v[int(p * (len(v) - 1) + 0.5)] / 1e6 if v else -1

    print(json.dumps({"client": "grpcio", "mode": "paced", "streams": n, "window_s": a.window, "cpu_s": cpu, "ctx_switches": ctx,
                      "rss_kb": rss, "samples_kb": samples_kb, "chunks": counters["chunks"], "samples": len(added), "late": st.late,
                      "errors": st.errors, "unmatched": st.unmatched,
                      "lag_mean_ms": counters["lag_ns"] / 1e6 / counters["chunks"] if counters["chunks"] else -1,
                      "added_p50_ms": pct(added, .5), "added_p99_ms": pct(added, .99),
                      "raw_p50_ms": pct(raw, .5), "raw_p99_ms": pct(raw, .99)}), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--target", default="127.0.0.1:50051")
    p.add_argument("--mode", default="paced", choices=["paced", "file", "cold"])
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--warmup", type=float, default=2)
    p.add_argument("--window", type=float, default=5)
    p.add_argument("--ca-file")
    p.add_argument("--system-roots", action="store_true", help="TLS verified by gRPC's default roots")
    p.add_argument("--wav")
    p.add_argument("--lat-out")
    p.add_argument("--launch-ns", type=int, default=0)
    asyncio.run(main(p.parse_args()))
    sys.stdout.flush()
