"""python -m speechclient_server --host 127.0.0.1 --port 0 [options]

Prints "listening on HOST:PORT" as its first line once it accepts connections."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from concurrent import futures

import grpc

from ._proto.speechly.identity.v2 import identity_pb2_grpc
from ._proto.speechly.slu.v1 import slu_pb2_grpc
from .intents import Intents
from .server import SLU, Identity, Settings


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="speechclient_server", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=50051)
    p.add_argument("--engine", choices=["pocketsphinx", "whisper", "sink"], default="pocketsphinx")
    p.add_argument("--intents", help="intent template file (default: the bundled intents.txt)")
    p.add_argument("--grammar", help="JSGF grammar for pocketsphinx (default: generated from the intents)")
    p.add_argument("--lm", action="store_true", help="pocketsphinx: use the general language model, not a grammar")
    p.add_argument("--whisper-model", help="a CTranslate2 Whisper model directory")
    p.add_argument("--tls-cert"), p.add_argument("--tls-key")
    p.add_argument("--token-validity", type=int, default=3600, help="seconds a login token is valid")
    p.add_argument("--allow-app-id", action="append", help="accept only these app ids (repeatable)")
    p.add_argument("--secret", default=None, help="JWT signing secret (default: random per run)")
    p.add_argument("--rtt-interval", type=float, default=5.0)
    p.add_argument("--workers", type=int, default=64, help="concurrent streams")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")

    intents = Intents.load(args.intents)
    if args.engine == "pocketsphinx":
        from .engines import PocketSphinxEngine
        grammar = open(args.grammar).read() if args.grammar else intents.jsgf()
        engine = PocketSphinxEngine(None if args.lm else grammar, use_lm=args.lm)
    elif args.engine == "whisper":
        from .engines import WhisperEngine
        engine = WhisperEngine(args.whisper_model)
    else:
        from .engines import SinkEngine
        engine = SinkEngine()

    settings = Settings(secret=(args.secret or os.urandom(32).hex()).encode(),
                        token_validity_s=args.token_validity, allowed_app_ids=args.allow_app_id,
                        rtt_interval_s=args.rtt_interval)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers),
                         options=[("grpc.so_reuseport", 0)])
    identity_pb2_grpc.add_IdentityAPIServicer_to_server(Identity(settings), server)
    slu_pb2_grpc.add_SLUServicer_to_server(SLU(settings, engine, intents, vad=args.engine != "sink"), server)
    address = f"{args.host}:{args.port}" if ":" not in args.host else f"[{args.host}]:{args.port}"
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            p.error("--tls-cert and --tls-key go together")
        creds = grpc.ssl_server_credentials([(open(args.tls_key, "rb").read(), open(args.tls_cert, "rb").read())])
        port = server.add_secure_port(address, creds)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        print(f"speechclient_server: cannot listen on {address}", file=sys.stderr)
        return 1
    server.start()
    print(f"listening on {args.host}:{port}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=1).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
