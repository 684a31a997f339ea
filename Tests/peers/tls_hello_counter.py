#!/usr/bin/env python3
"""A TLS server that accepts one key exchange group only, P-256, as a gRPC server built on the
system OpenSSL does (Debian's libgrpc: its C core sets that one group), and counts the
ClientHello messages of each handshake. A client whose first ClientHello carries no P-256 key
share gets a HelloRetryRequest and sends a second one: one more round trip per connection.

Usage: tls_hello_counter.py CERT KEY
Prints "PORT <n>" once listening on 127.0.0.1; after each handshake (ALPN h2), writes
"client hellos: <n>" to stderr and closes the connection. Serves until stdin closes.
"""
import socket
import ssl
import sys
import threading


def main():
    cert, key = sys.argv[1], sys.argv[2]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2"])
    ctx.set_ecdh_curve("prime256v1")  # with OpenSSL 3: SSL_CTX_set1_groups, this group alone
    hellos = threading.local()

    def on_message(conn, direction, version, content_type, msg_type, data):
        if direction == "read" and msg_type == ssl._TLSMessageType.CLIENT_HELLO:
            hellos.count = getattr(hellos, "count", 0) + 1

    ctx._msg_callback = on_message
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def serve(raw):
        hellos.count = 0
        try:
            with ctx.wrap_socket(raw, server_side=True) as tls:
                print(f"client hellos: {hellos.count}", file=sys.stderr, flush=True)
        except (ssl.SSLError, OSError) as e:
            print(f"handshake failed after {hellos.count} client hellos: {e}", file=sys.stderr, flush=True)

    def accept():
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(raw,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    print(f"PORT {listener.getsockname()[1]}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
