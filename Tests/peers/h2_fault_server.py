#!/usr/bin/env python3
"""A scripted, misbehaving gRPC-over-HTTP/2 server built on the Python `h2` library.

The request's :path picks the behaviour (/fault/<Name>); see SCENARIOS below. Anything else
is answered with one message "ok" and status OK.

Usage: h2_fault_server.py [--tls CERT KEY | --tls-no-alpn CERT KEY] [--drop eof|reset]
Prints "PORT <n>" once listening on 127.0.0.1, serves until stdin closes.
--drop: no HTTP/2 at all; each connection is dropped after the TLS handshake and the client's
first bytes, without a close_notify: closed (eof, a FIN) or aborted (reset, an RST).
"""
import socket
import ssl
import struct
import sys
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events

GOAWAY_ONCE_DONE = threading.Event()


def frame(message: bytes, compressed: bool = False) -> bytes:
    return struct.pack(">BI", 1 if compressed else 0, len(message)) + message


def ok_headers(extra=()):
    return [(":status", "200"), ("content-type", "application/grpc")] + list(extra)


class Connection:
    def __init__(self, sock):
        self.sock = sock
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, validate_inbound_headers=False))
        self.stop_reading = False   # stop acknowledging DATA (flow control never reopens)
        self.blackhole = False      # stop reading the socket entirely (PINGs go unanswered)
        self.answer_after_message = set()
        self.lock = threading.Lock()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def serve(self):
        self.conn.initiate_connection()
        self.flush()
        try:
            while True:
                if self.blackhole:
                    time.sleep(0.05)
                    continue
                data = self.sock.recv(65536)
                if not data:
                    return
                with self.lock:
                    for event in self.conn.receive_data(data):
                        self.handle(event)
                    self.flush()
        except (OSError, h2.exceptions.ProtocolError):
            return
        finally:
            try:
                self.sock.close()
            except OSError:
                pass

    def handle(self, event):
        if isinstance(event, h2.events.RequestReceived):
            headers = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                       for k, v in event.headers}
            path = headers.get(":path", "")
            name = path.rsplit("/", 1)[-1]
            handler = SCENARIOS.get(name, Connection.ok)
            handler(self, event.stream_id, headers)
        elif isinstance(event, h2.events.DataReceived):
            if not self.stop_reading:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            if event.stream_id in self.answer_after_message:
                self.answer_after_message.discard(event.stream_id)
                self.ok(event.stream_id, {})

    # -- scenarios -------------------------------------------------------------------------

    def answer_after_message_scenario(self, sid, headers):
        # Answers (ok) once a request message arrives: only when the client could send it.
        self.answer_after_message.add(sid)

    def ok(self, sid, headers):
        self.conn.send_headers(sid, ok_headers())
        self.conn.send_data(sid, frame(b"ok"))
        self.conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)

    def trailers_only(self, sid, headers):
        self.conn.send_headers(sid, ok_headers([("grpc-status", "5"),
                                                ("grpc-message", "not%20found%3A%20caf%C3%A9%20%E2%9C%93 100%")]),
                               end_stream=True)

    def status_out_of_range(self, sid, headers):
        """A status gRPC does not define (a proxy or a broken server): clients take it as UNKNOWN."""
        self.conn.send_headers(sid, ok_headers([("grpc-status", "99"), ("grpc-message", "no such code")]),
                               end_stream=True)

    def one_byte_frames(self, sid, headers):
        self.conn.send_headers(sid, ok_headers())
        self.flush()
        payload = frame(b"hello, one byte at a time") + frame(b"") + frame(b"second")
        for i in range(len(payload)):
            self.conn.send_data(sid, payload[i:i + 1])
            self.flush()
        self.conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)

    def truncated(self, sid, headers):
        self.conn.send_headers(sid, ok_headers())
        self.conn.send_data(sid, struct.pack(">BI", 0, 100) + b"0123456789")
        self.conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)

    def unavailable_after_one(self, sid, headers):
        self.conn.send_headers(sid, ok_headers())
        self.conn.send_data(sid, frame(b"first"))
        self.conn.send_headers(sid, [("grpc-status", "14"), ("grpc-message", "going%20away")], end_stream=True)

    def reset(self, sid, headers):
        self.conn.send_headers(sid, ok_headers())
        self.conn.reset_stream(sid, h2.errors.ErrorCodes.INTERNAL_ERROR)

    def goaway_once(self, sid, headers):
        if GOAWAY_ONCE_DONE.is_set():
            return self.ok(sid, headers)
        GOAWAY_ONCE_DONE.set()
        # last_stream_id below this stream: it was never processed (REFUSED_STREAM).
        self.conn.close_connection(error_code=h2.errors.ErrorCodes.NO_ERROR, last_stream_id=0)

    def goaway_refuse_all(self, sid, headers):
        self.conn.close_connection(error_code=h2.errors.ErrorCodes.NO_ERROR, last_stream_id=0)

    def goaway_graceful(self, sid, headers):
        # GOAWAY that still covers this stream: it must finish normally. Written by hand,
        # because h2 sends nothing more once it has sent GOAWAY itself.
        self.flush()
        self.sock.sendall(struct.pack(">I", 8)[1:] + bytes([7, 0]) + struct.pack(">III", 0, sid, 0))
        time.sleep(0.05)
        self.ok(sid, headers)

    def compressed(self, sid, headers):
        self.conn.send_headers(sid, ok_headers([("grpc-encoding", "gzip")]))
        self.conn.send_data(sid, frame(b"\x1f\x8b not really gzip", compressed=True))
        self.conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)

    def oversized(self, sid, headers):
        self.conn.send_headers(sid, ok_headers())
        self.conn.send_data(sid, struct.pack(">BI", 0, 5 * 1024 * 1024) + b"x" * 1000)

    def no_status(self, sid, headers):
        self.conn.send_headers(sid, ok_headers())
        self.conn.send_data(sid, frame(b"message"), end_stream=True)

    def http503(self, sid, headers):
        self.conn.send_headers(sid, [(":status", "503"), ("content-type", "text/plain")], end_stream=True)

    def http413(self, sid, headers):
        # What nginx answers a request body over client_max_body_size (before any response).
        self.conn.send_headers(sid, [(":status", "413"), ("content-type", "text/html")], end_stream=True)

    def send_goaway(self, sid, code, debug=b"", times=1):
        # Written by hand: h2 sends nothing more once it has sent GOAWAY itself.
        self.flush()
        payload = struct.pack(">II", sid, code) + debug
        goaway = struct.pack(">I", len(payload))[1:] + bytes([7, 0]) + struct.pack(">I", 0) + payload
        self.sock.sendall(goaway * times)
        time.sleep(0.05)

    def goaway_calm(self, sid, headers):
        # GOAWAY ENHANCE_YOUR_CALM covering this stream (gRPC's "too many pings"), then its answer.
        self.send_goaway(sid, 11, b"too_many_pings")
        self.ok(sid, headers)

    def goaway_calm_thrice(self, sid, headers):
        # Three GOAWAY ENHANCE_YOUR_CALM frames on one connection, then the answer.
        self.send_goaway(sid, 11, b"too_many_pings", times=3)
        self.ok(sid, headers)

    def goaway_calm_for_load(self, sid, headers):
        # ENHANCE_YOUR_CALM for something other than pings (a server shedding load).
        self.send_goaway(sid, 11, b"load")
        self.ok(sid, headers)

    def goaway_repeated(self, sid, headers):
        # The same GOAWAY (covering this stream) 10,000 times, then the answer.
        self.send_goaway(sid, 0, times=10_000)
        self.ok(sid, headers)

    def status_in_headers(self, sid, headers):
        # grpc-status in the response's headers, then a message and the end of the stream with
        # no trailers: a call cut after its headers (the status there is not the call's).
        self.conn.send_headers(sid, ok_headers([("grpc-status", "0")]))
        self.conn.send_data(sid, frame(b"message"), end_stream=True)

    def wrong_content_type(self, sid, headers):
        self.conn.send_headers(sid, [(":status", "200"), ("content-type", "text/html")])
        self.conn.send_data(sid, b"<html>hello</html>", end_stream=True)

    def huge_headers(self, sid, headers):
        self.conn.send_headers(sid, ok_headers([(f"x-filler-{i}", "v" * 1000) for i in range(100)]))
        self.conn.send_data(sid, frame(b"ok"))
        self.conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)

    def huge_trailers(self, sid, headers):
        self.conn.send_headers(sid, ok_headers())
        self.conn.send_data(sid, frame(b"ok"))
        self.conn.send_headers(sid, [("grpc-status", "0")] + [(f"x-filler-{i}", "v" * 1000) for i in range(100)],
                               end_stream=True)

    def two_messages(self, sid, headers):
        self.conn.send_headers(sid, ok_headers())
        self.conn.send_data(sid, frame(b"one") + frame(b"two"))
        self.conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)

    def continuation_flood(self, sid, headers):
        # CVE-2024-28182: a header block that never ends, as empty CONTINUATION frames (no
        # bytes for the client's header cap to count). Written by hand, past h2's state; sent
        # until the client closes the connection, or for 10 s.
        self.flush()
        hpack_status_200 = b"\x88"
        self.sock.sendall(struct.pack(">I", len(hpack_status_200))[1:] + bytes([1, 0]) + struct.pack(">I", sid) + hpack_status_200)
        empty = struct.pack(">I", 0)[1:] + bytes([9, 0]) + struct.pack(">I", sid)
        until = time.monotonic() + 10
        while time.monotonic() < until:
            self.sock.sendall(empty * 1000)

    def silent(self, sid, headers):
        pass  # never answers

    def stop_reading_scenario(self, sid, headers):
        self.stop_reading = True
        self.conn.send_headers(sid, ok_headers())

    def ok_while_still_receiving(self, sid, headers):
        """Stops acknowledging DATA (the client's request queues behind flow control), then
        ends the call with status OK 0.3 s later: a server or proxy ending a call early,
        whatever the client still has to send."""
        self.stop_reading = True
        self.conn.send_headers(sid, ok_headers())

        def later():
            time.sleep(0.3)
            with self.lock:
                self.conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)
                self.flush()
        threading.Thread(target=later, daemon=True).start()

    def blackhole_scenario(self, sid, headers):
        self.conn.send_headers(sid, ok_headers())
        self.blackhole = True

    def deaf_but_talking(self, sid, headers):
        """Stops reading the socket; 1.5 s later (after a client's keepalive PING at a 1 s
        interval) sends a PING of its own every 100 ms for 6 s: a peer that is still heard but no
        longer hears (the client's PING goes unanswered)."""
        self.conn.send_headers(sid, ok_headers())
        self.flush()
        self.blackhole = True

        def talk():
            time.sleep(1.5)
            for i in range(60):
                try:
                    self.sock.sendall(struct.pack(">I", 8)[1:] + bytes([6, 0]) + struct.pack(">I", 0) + struct.pack(">Q", i))
                except OSError:
                    return
                time.sleep(0.1)
        threading.Thread(target=talk, daemon=True).start()

    def early_hints(self, sid, headers):
        """An informational 103 before the response, as HTTP allows (RFC 9113 8.1)."""
        self.conn.send_headers(sid, [(":status", "103"), ("link", "</x>; rel=preload")])
        self.ok(sid, headers)

    def ok_then_blackhole(self, sid, headers):
        """Answers the call, then the connection goes silent (a NAT that forgot it while idle)."""
        self.ok(sid, headers)
        self.blackhole = True


SCENARIOS = {
    "TrailersOnly": Connection.trailers_only,
    "StatusOutOfRange": Connection.status_out_of_range,
    "OneByteFrames": Connection.one_byte_frames,
    "Truncated": Connection.truncated,
    "UnavailableAfterOne": Connection.unavailable_after_one,
    "Reset": Connection.reset,
    "GoAwayOnce": Connection.goaway_once,
    "GoAwayRefuseAll": Connection.goaway_refuse_all,
    "GoAwayGraceful": Connection.goaway_graceful,
    "Compressed": Connection.compressed,
    "Oversized": Connection.oversized,
    "NoStatus": Connection.no_status,
    "HTTP503": Connection.http503,
    "HTTP413": Connection.http413,
    "GoAwayCalm": Connection.goaway_calm,
    "GoAwayCalmThrice": Connection.goaway_calm_thrice,
    "GoAwayCalmForLoad": Connection.goaway_calm_for_load,
    "GoAwayRepeated": Connection.goaway_repeated,
    "StatusInHeaders": Connection.status_in_headers,
    "WrongContentType": Connection.wrong_content_type,
    "HugeHeaders": Connection.huge_headers,
    "HugeTrailers": Connection.huge_trailers,
    "TwoMessages": Connection.two_messages,
    "ContinuationFlood": Connection.continuation_flood,
    "Silent": Connection.silent,
    "StopReading": Connection.stop_reading_scenario,
    "OkWhileStillReceiving": Connection.ok_while_still_receiving,
    "Blackhole": Connection.blackhole_scenario,
    "OkThenBlackhole": Connection.ok_then_blackhole,
    "EarlyHints": Connection.early_hints,
    "AnswerAfterMessage": Connection.answer_after_message_scenario,
    "DeafButTalking": Connection.deaf_but_talking,
}


def drop(sock, mode):
    try:
        sock.recv(1)
    except OSError:
        pass
    if mode == "reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # an SSLSocket's close() sends no close_notify


def main():
    drop_mode = None
    if "--drop" in sys.argv:
        i = sys.argv.index("--drop")
        drop_mode = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    tls_context = None
    if len(sys.argv) == 4 and sys.argv[1] in ("--tls", "--tls-no-alpn"):
        tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls_context.load_cert_chain(sys.argv[2], sys.argv[3])
        if sys.argv[1] == "--tls":
            tls_context.set_alpn_protocols(["h2"])
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(f"PORT {listener.getsockname()[1]}", flush=True)

    def accept_loop():
        while True:
            sock, _ = listener.accept()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls_context is not None:
                try:
                    sock = tls_context.wrap_socket(sock, server_side=True)
                except (ssl.SSLError, OSError):
                    sock.close()
                    continue
            if drop_mode:
                drop(sock, drop_mode)
                continue
            threading.Thread(target=Connection(sock).serve, daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    sys.stdin.read()


if __name__ == "__main__":
    main()
