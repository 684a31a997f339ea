"""python -m speechclient [transcribe] FILE --url URL [--app-id ID] [--json]

Transcribes a WAV file through libspeechclient, printing words as they arrive (or, with
--json, the same JSON lines as the C demo). Exit status 1 when an error ended the run."""
from __future__ import annotations

import argparse
import json
import os
import sys

from . import Client, ErrorEvent, Segment, StartEvent, StopEvent, WavFile, SpeechClientError, status_text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m speechclient", description=__doc__.splitlines()[0])
    p.add_argument("command", nargs="?", choices=["transcribe"], default="transcribe")
    p.add_argument("file", nargs="?", help="WAV file")
    p.add_argument("--file", dest="file_opt", help="WAV file (same as the positional argument)")
    p.add_argument("--url", default=os.environ.get("SPEECHCLIENT_URL", "grpc://127.0.0.1:50051"))
    p.add_argument("--app-id", default="speechclient-python")
    p.add_argument("--cache-dir")
    p.add_argument("--ca-file")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    path = args.file or args.file_opt
    if not path:
        p.error("a WAV file is required")
    failed = False
    try:
        with Client(args.url, app_id=args.app_id, audio=WavFile(path), cache_dir=args.cache_dir,
                    ca_file=args.ca_file) as client:
            client.start()
            live = ""
            for u in client.updates():
                if args.json:
                    if isinstance(u, Segment):
                        line = u.json
                    elif isinstance(u, ErrorEvent):
                        line = json.dumps({"type": "error", "code": status_text(u.code), "status": u.code,
                                           "grpc_status": -1 if u.grpc_status is None else u.grpc_status,
                                           "message": u.message}, separators=(",", ":"))
                    else:
                        line = json.dumps({"type": "start" if isinstance(u, StartEvent) else "stop",
                                           "context_id": u.context_id}, separators=(",", ":"))
                    print(line, flush=True)
                elif isinstance(u, Segment):
                    if u.final:
                        print(("\r" + " " * len(live) + "\r") if live and sys.stdout.isatty() else "", end="")
                        extra = f"  [intent: {u.intent.intent}]" if u.intent else ""
                        extra += "".join(f"  [{e.type}: {e.value}]" for e in u.entities)
                        print(u.transcript + extra, flush=True)
                        live = ""
                    elif sys.stdout.isatty():
                        live = "... " + u.transcript
                        print("\r" + live, end="", flush=True)
                if isinstance(u, ErrorEvent):
                    failed = True
                    if not args.json:
                        print(f"error: {status_text(u.code)}: {u.message}", file=sys.stderr)
    except SpeechClientError as e:
        print(f"python -m speechclient: {e}", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
