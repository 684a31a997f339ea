#!/usr/bin/env python3
"""A grpclib test peer: an independent gRPC server, pure Python on the `h2` package (no C-core),
serving the same /test.Echo methods as grpc_echo_server.py with no .proto and no generated stubs.
Messages stay raw bytes: a pass-through codec replaces grpclib's protobuf one, and the service
maps its paths to handlers itself (what grpclib's generated `*_grpc.py` files would do).

Methods:
  /test.Echo/Unary      unary: returns the request bytes
  /test.Echo/Bidi       bidi: echoes every request message as it arrives, then status OK
  /test.Echo/Metadata   unary: returns "name=value\\n" lines of the request metadata, plus user-agent
  /test.Echo/Fail       unary: request "<code> <message>" -> ends with that status and message
  /test.Echo/Sleep      unary: sleeps int(request) ms, then echoes

Usage: grpclib_echo_server.py [--tls CERT KEY]; prints "PORT <n>" once listening on 127.0.0.1,
then serves until stdin closes (so a test that dies takes the server with it).
"""
import asyncio
import ssl
import sys
import threading

from grpclib.const import Cardinality, Handler, Status
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError
from grpclib.server import Server


class RawCodec(CodecBase):
    """Messages are bytes on both sides. The subtype must be "proto": the client sends
    `content-type: application/grpc`, which grpclib reads as application/grpc+proto."""

    __content_subtype__ = "proto"

    def encode(self, message, message_type):
        return bytes(message)

    def decode(self, data, message_type):
        return bytes(data)


class Echo:
    async def unary(self, stream):
        await stream.send_message(await stream.recv_message())

    async def bidi(self, stream):
        async for message in stream:
            await stream.send_message(message)

    async def metadata(self, stream):
        await stream.recv_message()
        # grpclib keeps user-agent out of stream.metadata; the grpcio peer lists it, so do we.
        lines = [f"{k}={v}" for k, v in stream.metadata.items()]
        if stream.user_agent is not None:
            lines.append(f"user-agent={stream.user_agent}")
        await stream.send_message(("\n".join(lines) + "\n").encode())

    async def fail(self, stream):
        code_text, _, message = (await stream.recv_message()).decode().partition(" ")
        # grpclib percent-encodes the message into grpc-message itself.
        raise GRPCError(Status(int(code_text)), message)

    async def sleep(self, stream):
        request = await stream.recv_message()
        await asyncio.sleep(int(request.decode()) / 1000.0)
        await stream.send_message(request)

    def __mapping__(self):
        unary = Cardinality.UNARY_UNARY
        return {
            "/test.Echo/Unary": Handler(self.unary, unary, bytes, bytes),
            "/test.Echo/Bidi": Handler(self.bidi, Cardinality.STREAM_STREAM, bytes, bytes),
            "/test.Echo/Metadata": Handler(self.metadata, unary, bytes, bytes),
            "/test.Echo/Fail": Handler(self.fail, unary, bytes, bytes),
            "/test.Echo/Sleep": Handler(self.sleep, unary, bytes, bytes),
        }


async def serve(tls):
    context = None
    if tls:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls[0], tls[1])
        context.set_alpn_protocols(["h2"])
    server = Server([Echo()], codec=RawCodec())
    await server.start("127.0.0.1", 0, ssl=context)
    port = server._server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    loop = asyncio.get_running_loop()
    stdin_closed = loop.create_future()
    # Serve until the test closes our stdin (or dies).
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stdin_closed.set_result, None)),
                     daemon=True).start()
    await stdin_closed
    server.close()
    await server.wait_closed()


def main():
    args = sys.argv[1:]
    tls = None
    if len(args) == 3 and args[0] == "--tls":
        tls = (args[1], args[2])
    elif args:
        sys.exit(__doc__)
    asyncio.run(serve(tls))


if __name__ == "__main__":
    main()
