"""python -m speechclient: transcribe a WAV file or a microphone, like bindings/c's speechclient-demo.

    python -m speechclient --url URL --app-id ID --file F.wav [--json]
    python -m speechclient --url URL --app-id ID --mic [DEVICE] [--json]     (until Ctrl-C)
    arecord -f S16_LE -r 16000 | python -m speechclient --file -             (standard input)
    ... --file - --raw 16000[,1]                                              (raw PCM on stdin)
    ... [--hands-free | --wakeword PHRASE] [--json [--levels]]

Hands-free (--hands-free, or --wakeword PHRASE): the library's voice activity detector opens a
context when speech begins and stops it after a pause, as often as the user speaks, until the
end of the file or Ctrl-C; with --wakeword only what follows the phrase in a context is shown.

Without --json: a line per final segment ("transcript  [intent: X]  [type: value]"), and the
tentative text as a live line on a terminal (a "... text" line otherwise); for a PCM WAV file the
live line starts with a progress bar, how far into the file the words heard so far reach. With --json: the
C demo's stable JSON lines, one object a line:

    {"type":"segment", ...}   exactly as spc_segment_json() renders a segment update
    {"type":"start","context_id":"..."}
    {"type":"stop","context_id":"..."}
    {"type":"error","code":"<spc_status_str>","status":N,"grpc_status":N,"message":"..."}
    {"type":"state","state":"connecting"|"ready"|"reconnecting"|"unavailable"|"suspended",...}
    {"type":"listen","event":"speech"|"silence"|"activate"|"deactivate"|"timeout","position_ms":N}
    {"type":"level","dbfs":-23.5,"position_ms":N}    (--levels)

Without --json, a hands-free utterance cut at the maximum length is reported on stderr.

The error line is printed for error events and for a client that could not be created (for
example a missing WAV file), which then ends the run.

Exit status: 0 on success; 1 when an error event or a failed call ended the run (also when no
new update came within --timeout-ms for a file, or the last results did not come within it
after Ctrl-C, or a second Ctrl-C gave up waiting for them); 2 for a usage error (including an
option value the library rejects); 130 for a Ctrl-C before the run began or while the client
was closed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional, TextIO

from . import (AudioSource, AudioStream, Client, ErrorEvent, LevelEvent, Listen, ListenEvent, LogLevel, Microphone,
               Segment, SpeechClientError, StartEvent, StateEvent, StopEvent, WavFile, status_text, version)


def json_string(s: str) -> str:
    """A JSON string escaped exactly as the C demo escapes it (UTF-8 kept as is)."""
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def event_json(update) -> Optional[str]:
    """The JSON line for an update, as the C demo prints it."""
    if isinstance(update, Segment):
        return update.json
    if isinstance(update, StateEvent):
        name = update.state.name.lower() if hasattr(update.state, "name") else "unknown"
        line = f'{{"type":"state","state":"{name}"'
        if name == "reconnecting":
            line += f',"attempt":{update.attempt},"delay_ms":{update.delay_ms}'
        if update.reason is not None:
            line += f',"message":{json_string(update.reason.message)}'
        return line + "}"
    if isinstance(update, (StartEvent, StopEvent)):
        kind = "start" if isinstance(update, StartEvent) else "stop"
        return f'{{"type":"{kind}","context_id":{json_string(update.context_id)}}}'
    if isinstance(update, ListenEvent):
        name = update.event.name.lower() if isinstance(update.event, Listen) else "unknown"
        return f'{{"type":"listen","event":"{name}","position_ms":{update.position_ms}}}'
    if isinstance(update, LevelEvent):
        # %.1f of the same double in C and here: both round the exact binary value.
        return f'{{"type":"level","dbfs":{update.dbfs:.1f},"position_ms":{update.position_ms}}}'
    if isinstance(update, (ErrorEvent, SpeechClientError)):
        grpc = -1 if update.grpc_status is None else update.grpc_status
        return (f'{{"type":"error","code":{json_string(status_text(update.code))},"status":{int(update.code)},'
                f'"grpc_status":{grpc},"message":{json_string(update.message)}}}')
    return None


class _TextOutput:
    """The demo's human output: final lines, and tentative text as a live line (tty) or as
    "... text" lines, printed only when the words change. For a file on a terminal the live line
    starts with a progress bar: how far into the file the words heard so far reach."""

    def __init__(self, out: TextIO, duration_ms: Optional[int] = None):
        self.out = out
        self.tty = out.isatty()
        self.live_len = 0
        self.last = ""
        self.duration_ms = duration_ms if self.tty and duration_ms else None
        self.heard_ms = 0

    def _bar(self) -> str:
        if not self.duration_ms:
            return ""
        pct = min(100, 100 * self.heard_ms // self.duration_ms)
        return f"[{'#' * (pct // 5)}{'.' * (20 - pct // 5)}] {pct:3d}% "

    def _live(self, text: str) -> None:
        self.clear_live()
        line = self._bar() + text
        self.out.write(line)
        self.live_len = len(line)

    def clear_live(self) -> None:
        if self.tty and self.live_len:
            self.out.write("\r" + " " * self.live_len + "\r")
            self.live_len = 0

    def segment(self, s: Segment) -> None:
        if s.words:
            self.heard_ms = max(self.heard_ms, max(w.end_ms for w in s.words))
        if s.final:
            self.clear_live()
            self.last = ""
            line = s.transcript
            if s.intent is not None and s.intent.intent:
                line += f"  [intent: {s.intent.intent}]"
            line += "".join(f"  [{e.type}: {e.value}]" for e in s.entities)
            self.out.write(line + "\n")
            if self.duration_ms:
                self._live("")
        elif s.transcript != self.last:
            self.last = s.transcript
            if self.tty:
                self._live("... " + s.transcript)
            else:
                self.out.write("... " + s.transcript + "\n")
        self.out.flush()


def _wav_duration_ms(path: str) -> Optional[int]:
    """A PCM WAV file's duration, for the progress bar; None when the wave module cannot tell
    (float or 24-bit files, a bad file: the library reports those)."""
    import wave
    try:
        with wave.open(path) as w:
            return w.getnframes() * 1000 // max(1, w.getframerate())
    except Exception:
        return None


def _number(low: int, high: int):
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"needs a number from {low} to {high}, not {text!r}")
        return value
    return parse


def _versions() -> str:
    """The binding's version and the loaded library's, with where it was loaded from."""
    from . import __version__, _native
    return f"speechclient {__version__} (Python binding), libspeechclient {version()} ({_native.LIBRARY_PATH})"


class _PrintVersions(argparse.Action):
    """--version on one line (argparse's own action wraps it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(_versions())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m speechclient",
                                description="Transcribe a WAV file or a microphone with libspeechclient.")
    p.add_argument("command", nargs="?", choices=["transcribe"],
                   help="'transcribe WAV' is the same as --file WAV (the older form, kept for scripts)")
    p.add_argument("wav", nargs="?", help="the WAV file of 'transcribe WAV'")
    p.add_argument("--url", default=os.environ.get("SPEECHCLIENT_URL") or "grpc://127.0.0.1:50051",
                   help="server: grpc://host:port or grpc+tls://host:port (Speechly), wyoming://host:port or "
                        "wyoming+unix:///path (Wyoming), riva://host:port or rivas://host:port (NVIDIA Riva) "
                        "(default $SPEECHCLIENT_URL, else %(default)s)")
    p.add_argument("--app-id", default="speechclient-python", help="application id, Speechly only (default %(default)s)")
    p.add_argument("--project-id", help="project id")
    p.add_argument("--language", default="en-US", help="BCP-47 language (default %(default)s)")
    p.add_argument("--model", help="the model to ask a Wyoming or Riva server for (default: its own)")
    p.add_argument("--header", action="append", default=[], metavar="NAME=VALUE",
                   help="a request header for a Speechly or Riva server (repeatable)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--file", metavar="WAV", help="transcribe a WAV file, then exit; '-': standard input (a WAV "
                                                   "stream, or raw PCM with --raw), until its end or Ctrl-C")
    src.add_argument("--mic", metavar="DEVICE", nargs="?", const="default",
                     help="transcribe an ALSA device (default 'default') until Ctrl-C")
    p.add_argument("--raw", metavar="RATE[,CHANNELS]",
                   help="with --file -: raw signed 16-bit little-endian PCM, no header (8000-192000 Hz, 1-8 channels, "
                        "default 1)")
    p.add_argument("--ca-file", help="PEM CA certificates to trust (grpc+tls)")
    p.add_argument("--insecure", action="store_true", help="do not verify the server's certificate (development)")
    p.add_argument("--cache-dir", help="token and device-id cache directory")
    p.add_argument("--chunk-ms", type=_number(20, 1000), default=100,
                   help="audio message duration, 20-1000 ms (default 100)")
    p.add_argument("--timeout-ms", type=_number(-1, 2**31 - 1), default=120000,
                   help="a file: give up when no new update (a result, an event) came for this long; the microphone or standard input: "
                        "how long to wait for the last results after Ctrl-C (-1: no limit; default %(default)s)")
    p.add_argument("--timeouts-ms", metavar="CONNECT[,LOGIN[,START]]",
                   help="the server must answer a connection, a login and a context's start within these, "
                        "100-600000 ms each (default 5000,10000,10000)")
    p.add_argument("--hands-free", action="store_true",
                   help="listen: speech opens a context, a pause closes it (until the end or Ctrl-C)")
    p.add_argument("--wakeword", metavar="PHRASE",
                   help="as --hands-free, showing only contexts where PHRASE was heard "
                        "(with --wakeword-url: the service's wake word, e.g. hey_jarvis)")
    p.add_argument("--wakeword-url", metavar="URL",
                   help="a Wyoming wake-word service opens the contexts (wyoming://HOST:PORT)")
    p.add_argument("--levels", action="store_true", help="with --json: the level of each chunk in dBFS")
    p.add_argument("--list-devices", action="store_true",
                   help="list the ALSA capture devices (the names --mic takes), then exit")
    p.add_argument("--json", action="store_true", help="one JSON object per line (the C demo's stable format)")
    p.add_argument("--verbose", action="store_true", help="every library log line on stderr (warnings are always there)")
    p.add_argument("--version", action=_PrintVersions, nargs=0, help="the binding's and the library's versions")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.list_devices:
        from . import audio_devices
        for device in audio_devices():
            if args.json:
                print(json.dumps({"type": "device", "name": device.name, "description": device.description}))
            else:
                print(device.name + "\n    " + device.description.replace("\n", "\n    "))
        return 0
    path = args.file or args.wav
    if args.wav and args.file:
        p.error("give the WAV file once")
    if (path is None) == (args.mic is None):
        p.error("give exactly one of --file WAV or --mic [DEVICE]")
    raw = (0, 0)
    if args.raw is not None:
        if path != "-":
            p.error("--raw goes with --file - (standard input)")
        try:
            given = [int(v) for v in args.raw.split(",")]
        except ValueError:
            given = []
        if not 1 <= len(given) <= 2 or not 8000 <= given[0] <= 192000 or not 1 <= (given + [1])[1] <= 8:
            p.error(f"--raw needs RATE[,CHANNELS] (8000-192000 Hz, 1-8 channels), not {args.raw}")
        raw = (given[0], (given + [1])[1])
    # Standard input is live audio as far as the CLI knows: it runs until its end or Ctrl-C, as
    # the microphone does; --timeout-ms then bounds only the wait for the last results.
    live = path is None or path == "-"
    if path == "-":
        audio: AudioSource = AudioStream(fd=sys.stdin.fileno(), sample_rate=raw[0], channels=raw[1])
    elif path is not None:
        audio = WavFile(path)
    else:
        audio = Microphone(device=args.mic)
    prog = "python -m speechclient"
    out = sys.stdout
    text = _TextOutput(out, _wav_duration_ms(path) if path not in (None, "-") else None)
    failed = False
    timeout = None if args.timeout_ms < 0 else args.timeout_ms / 1000

    def on_log(level: LogLevel, message: str) -> None:
        print(f"speechclient [{level.name.lower()}] {message}", file=sys.stderr, flush=True)

    timeouts = None
    if args.timeouts_ms is not None:
        try:
            given = [int(v) for v in args.timeouts_ms.split(",")]
        except ValueError:
            given = []
        if not 1 <= len(given) <= 3:
            p.error(f"--timeouts-ms needs CONNECT[,LOGIN[,START]] in milliseconds, not {args.timeouts_ms}")
        timeouts = tuple(given + [5000, 10000, 10000][len(given):])
    # As the demo: a wakeword means wakeword listening, with or without --hands-free.
    activation = ("wakeword" if args.wakeword is not None or args.wakeword_url is not None
                  else "voice" if args.hands_free else "manual")
    try:
        client = Client(url=args.url, app_id=args.app_id, project_id=args.project_id, language=args.language,
                        model=args.model, headers=[(h.partition("=")[0], h.partition("=")[2]) for h in args.header] or None,
                        cache_dir=args.cache_dir, ca_file=args.ca_file, insecure_tls=args.insecure,
                        audio=audio,
                        chunk_ms=args.chunk_ms, timeouts=timeouts,
                        activation=activation, wakeword=args.wakeword, wakeword_url=args.wakeword_url, levels=args.levels,
                        log_level=LogLevel.DEBUG if args.verbose else LogLevel.WARNING,
                        on_log=on_log)  # warnings always, as the C demo; --verbose: every line
    except SpeechClientError as e:
        if e.option is not None:  # a value the library rejects: a usage error, as in the C demo
            p.print_usage(sys.stderr)
            print(f"{prog}: {e.message}", file=sys.stderr)
            return 2
        if args.json:
            out.write(f"{event_json(e)}\n")
            out.flush()
        print(f"{prog}: {status_text(e.code)}: {e.message}", file=sys.stderr)
        return 1

    def show(update) -> None:
        """Prints one update, as the C demo does."""
        if args.json:
            line = event_json(update)
            if line is not None:
                out.write(line + "\n")
                out.flush()
        elif isinstance(update, Segment):
            text.segment(update)
        elif isinstance(update, ErrorEvent):
            text.clear_live()
            out.flush()
            print(f"{prog}: {status_text(update.code)}: {update.message}", file=sys.stderr, flush=True)
        elif isinstance(update, ListenEvent) and update.event == Listen.TIMEOUT:
            text.clear_live()
            out.flush()
            print(f"{prog}: the utterance reached the maximum length at {update.position_ms / 1000:.1f} s",
                  file=sys.stderr, flush=True)
        elif isinstance(update, StateEvent) and update.attempt > 0:
            text.clear_live()
            out.flush()
            print(f"{prog}: connection lost; reconnecting in {update.delay_ms} ms (attempt {update.attempt})",
                  file=sys.stderr, flush=True)
        elif isinstance(update, StateEvent) and update.reason is not None:
            text.clear_live()
            out.flush()
            print(f"{prog}: server unavailable: {update.reason.message}", file=sys.stderr, flush=True)

    try:
        with client:
            client.start()
            # A file: no new result within the timeout is a failure (not a total: a long file
            # takes long). Live audio waits for its end or Ctrl-C.
            updates = client.updates(timeout=None if live else timeout)
            interrupted = False
            while True:
                # Showing an update is inside the try too: a Ctrl-C that lands while a line is
                # printed must stop the context like one that lands while waiting (it used to
                # end the CLI without the last results).
                try:
                    update = next(updates)
                    if isinstance(update, ErrorEvent):
                        failed = True
                    show(update)
                except StopIteration:
                    break
                except KeyboardInterrupt:
                    if interrupted:
                        text.clear_live()
                        print(f"{prog}: interrupted again: not waiting for the last results", file=sys.stderr)
                        return 1
                    interrupted = True  # Ctrl-C: stop the context and print its last results
                    try:
                        client.stop()
                    except SpeechClientError:
                        pass  # it ended by itself meanwhile (the end of standard input)
                    # The interrupt may have ended the iterator: a new one delivers what is still
                    # coming or queued, the last results within the timeout. On a client idle
                    # with nothing queued there is nothing left (a new one would wait for a start).
                    # Idle as wait_idle() tells it: the state alone is IDLE before the last
                    # callbacks ran, and their updates were then not printed.
                    if not client.wait_idle(0) or client._queue:
                        updates = client.updates(timeout=timeout)
                    continue
    except SpeechClientError as e:
        text.clear_live()
        print(f"{prog}: {status_text(e.code)}: {e.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    text.clear_live()
    out.flush()
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
