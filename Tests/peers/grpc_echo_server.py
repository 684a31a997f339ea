#!/usr/bin/env python3
"""A grpcio (C-core) test peer with raw-bytes generic handlers, no .proto needed.

Methods:
  /test.Echo/Unary      unary: returns the request bytes
  /test.Echo/Bidi       bidi: echoes every request message, then status OK
  /test.Echo/Metadata   unary: returns "name=value\\n" lines of the request metadata
  /test.Echo/Fail       unary: request "<code> <message>" -> aborts with that status
  /test.Echo/Sleep      unary: sleeps int(request) ms, then echoes

Usage: grpc_echo_server.py [--max-concurrent-streams N] [--tls CERT KEY | --ipv6]; prints "PORT <n>" once listening on 127.0.0.1,
then serves until stdin closes (so a test that dies takes the server with it).
"""
import sys
import threading
import time
from concurrent import futures

import grpc


def unary(request, context):
    return request


def bidi(request_iterator, context):
    for message in request_iterator:
        yield message


def metadata(request, context):
    lines = [f"{k}={v}" for k, v in context.invocation_metadata()]
    return ("\n".join(lines) + "\n").encode()


def fail(request, context):
    code_text, _, message = request.decode().partition(" ")
    code = next(c for c in grpc.StatusCode if c.value[0] == int(code_text))
    context.abort(code, message)


def sleep(request, context):
    time.sleep(int(request.decode()) / 1000.0)
    return request


def main():
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
        "Metadata": grpc.unary_unary_rpc_method_handler(metadata),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "Sleep": grpc.unary_unary_rpc_method_handler(sleep),
    }
    max_streams = 2000
    if "--max-concurrent-streams" in sys.argv:  # what the server's SETTINGS allow per connection
        i = sys.argv.index("--max-concurrent-streams")
        max_streams = int(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64),
                         options=[("grpc.max_concurrent_streams", max_streams)],
                         maximum_concurrent_rpcs=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", handlers),))
    if len(sys.argv) == 4 and sys.argv[1] == "--tls":
        with open(sys.argv[2], "rb") as f:
            cert = f.read()
        with open(sys.argv[3], "rb") as f:
            key = f.read()
        creds = grpc.ssl_server_credentials([(key, cert)])
        port = server.add_secure_port("127.0.0.1:0", creds)
    elif len(sys.argv) == 2 and sys.argv[1] == "--ipv6":
        port = server.add_insecure_port("[::1]:0")  # IPv6 loopback only
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"PORT {port}", flush=True)
    # Serve until the test closes our stdin (or dies).
    threading.Thread(target=lambda: (sys.stdin.read(), server.stop(0)), daemon=True).start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
