"""A TLS server that completes the handshake (ALPN h2), reads the client's first bytes, then drops
the connection without a TLS close_notify: `--mode eof` closes the socket (FIN), `--mode reset`
aborts it (RST). For the tests of how a lost TLS connection is reported (a network error, so the
client reconnects) and that writing into it raises no SIGPIPE in the process.

    python tls_drop_server.py CERT KEY [--mode eof|reset]     first line: "PORT N"
Runs until its stdin closes.
"""
import socket
import ssl
import struct
import sys
import threading


def main() -> None:
    cert, key = sys.argv[1], sys.argv[2]
    mode = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "eof"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2"])
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print(f"PORT {listener.getsockname()[1]}", flush=True)

    def accept_loop():
        while True:
            raw, _ = listener.accept()
            try:
                tls = context.wrap_socket(raw, server_side=True)
                tls.recv(1)
            except (ssl.SSLError, OSError):
                raw.close()
                continue
            if mode == "reset":
                tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            tls.close()  # SSLSocket.close() sends no close_notify

    threading.Thread(target=accept_loop, daemon=True).start()
    sys.stdin.read()


if __name__ == "__main__":
    main()
