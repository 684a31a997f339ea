#!/usr/bin/env python3
"""grpcio (C-core) client side of the transport micro-benchmark: on one bidi stream to
/test.Echo/Bidi, send a 3,200-byte message, wait for its echo, repeat. Prints one line:
  grpcio messages=<n> p50_ms=<x> p95_ms=<y> cpu_us_per_msg=<z>
Usage: grpc_bench_client.py PORT COUNT
"""
import queue
import resource
import sys
import threading
import time

import grpc


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    port, count = int(sys.argv[1]), int(sys.argv[2])
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    bidi = channel.stream_stream("/test.Echo/Bidi", request_serializer=None, response_deserializer=None)
    outgoing = queue.Queue()

    def requests():
        while True:
            item = outgoing.get()
            if item is None:
                return
            yield item

    responses = bidi(requests())
    payload = bytes(3200)
    # Warm up.
    for _ in range(50):
        outgoing.put(payload)
        next(responses)
    samples = []
    cpu0 = cpu_seconds()
    for _ in range(count):
        t0 = time.perf_counter_ns()
        outgoing.put(payload)
        next(responses)
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    cpu = cpu_seconds() - cpu0
    outgoing.put(None)
    for _ in responses:
        pass
    samples.sort()
    print(f"grpcio messages={count} p50_ms={samples[len(samples) // 2]:.3f} "
          f"p95_ms={samples[int(len(samples) * 0.95)]:.3f} cpu_us_per_msg={cpu / count * 1e6:.1f}", flush=True)


if __name__ == "__main__":
    main()
