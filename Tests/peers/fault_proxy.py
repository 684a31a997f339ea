"""A TCP proxy for fault tests: forwards 127.0.0.1:<port> to a target and, on a command read
from stdin, breaks the connections.

    python fault_proxy.py TARGET_HOST:PORT      first line: "listening on 127.0.0.1:PORT"
    stdin "drop"        close every open connection at once (both directions)
    stdin "outage S"    drop, then refuse new connections for S seconds
    stdin "stall S"     hold every byte in both directions for S seconds (connections stay open)
    stdin "target H:P"  forward new connections to H:P from now on (a restarted server)
Each command is answered with one line on stdout.
"""
import asyncio
import sys
import time


async def main() -> None:
    host, port = sys.argv[1].rsplit(":", 1)
    conns = set()
    refuse_until = 0.0
    stall_until = 0.0

    async def pipe(reader, writer):
        try:
            while data := await reader.read(65536):
                while time.monotonic() < stall_until:
                    await asyncio.sleep(0.02)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(client_reader, client_writer):
        if time.monotonic() < refuse_until:
            client_writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        pair = (client_writer, up_writer)
        conns.add(pair)
        tasks = [asyncio.ensure_future(pipe(client_reader, up_writer)), asyncio.ensure_future(pipe(up_reader, client_writer))]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
        client_writer.close()
        up_writer.close()
        conns.discard(pair)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(f"listening on 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().strip():
        words = line.split()
        if words[0] == "stall":
            stall_until = time.monotonic() + float(words[1])
            print(f"stalled {len(conns)}", flush=True)
            continue
        if words[0] == "target":
            host, port = words[1].rsplit(":", 1)
            print(f"target {host}:{port}", flush=True)
            continue
        if words[0] in ("drop", "outage"):
            if words[0] == "outage":
                refuse_until = time.monotonic() + float(words[1])
            for a, b in list(conns):
                for w in (a, b):
                    try:
                        w.transport.abort()
                    except Exception:
                        pass
            print(f"dropped {len(conns)}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
