#!/usr/bin/env python3
"""A scripted, misbehaving Wyoming ASR server (stdlib only) for the Wyoming backend's tests.

Usage: wyoming_fault_server.py --scenario NAME [--port N] [--unix PATH] [--close-after-transcript]
                               [--close-count N] [--reset] [--error-count N] [--error-delay S]
                               [--events-log FILE]

Listens on 127.0.0.1 (port 0 unless --port: the kernel picks one), or on a unix socket with
--unix PATH, and prints "listening on 127.0.0.1:PORT" (or "listening on unix:PATH") as its
first stdout line, then nothing more on stdout. One line per event it receives goes to stderr
(audio chunks are summed, not logged one by one): send stderr to a file, not to a pipe nobody
reads. --events-log FILE also writes every received event as a JSON line
{"conn", "type", "data", "payload_length"}, for tests that check what a client sent.
When stdin is a pipe, the server exits when it closes (so a crashed test run leaves nothing
behind); with stdin on /dev/null or a terminal it runs until killed.

The framing (wyoming's README, "Format"): a header line of JSON, {"type", "data"?,
"data_length"?, "payload_length"?, "version"} and "\\n"; then data_length bytes of JSON merged
over the header's "data"; then payload_length bytes of payload. What this server sends is built
byte by byte below, so the faults are exactly what they say.

Scenarios (--scenario):
  Normal          describe -> info (one asr program "fault-asr", one model "fault-model",
                  languages ["en"], supports_transcript_streaming false); transcribe is noted;
                  audio-start/-chunk/-stop: after audio-stop, transcript {"text": "<N> bytes"}
                  where N is the number of audio payload bytes received since audio-start on
                  this connection. ping -> pong. The connection stays open for the next
                  utterance unless --close-after-transcript (wyoming-faster-whisper closes it). --transcript-delay S
                  waits S seconds before each transcript (a recognizer slow to finish).
  Streaming       info with supports_transcript_streaming true. On the first audio-chunk after
                  audio-start: transcript-start {"language": "en"}; then for every 0.5 s of
                  audio received a transcript-chunk with the next delta of text ("part1",
                  " part2", ...); at audio-stop a last chunk " <N> bytes", then transcript
                  {"text": <all chunks joined>}, then transcript-stop.
  StreamingStopFirst  the same with transcript-stop before transcript (a client should accept
                  both orders; the README's order is the one above).
  NoInfo          accepts and reads, never answers anything.
  HTTP            reads the first bytes, answers "HTTP/1.1 400 Bad Request" with a small body
                  and closes.
  HugePayload     answers describe with an info header claiming payload_length 2^40, then sends
                  64 KiB of it and keeps the connection open (60 s).
  HugeData        the same with data_length 2^40.
  HugeLine        answers describe with a header line of 10 MB without a newline, then keeps
                  the connection open (60 s).
  TruncatedJSON   answers describe with a header line that is JSON cut off mid-object
                  ('{"type": "info", "data": {"asr": [' + "\\n"), then keeps it open.
  TruncatedData   answers describe with a valid header whose data_length bytes are JSON cut
                  off mid-object.
  UnknownEvents   as Normal, but sends unknown event types (with data, with a payload, with
                  extra header fields) before info and before the transcript.
  NotUTF8         as Normal, but the transcript's data holds bytes that are not UTF-8
                  (b'{"text": "caf\\xc3 \\xff\\xfe <N> bytes"}', data_length counts them).
  CloseMidStream  the first --close-count (default 1) connections that stream audio are closed
                  once they have received 1 s of audio (by audio-start's rate, width and
                  channels; 32000 bytes at 16 kHz mono s16), without answering; later
                  connections behave as Normal, so a client's reconnect with replay can be
                  checked by the byte count in the transcript. --reset closes with an RST.
  Error           as Normal, but audio-stop is answered with error
                  {"text": "scripted failure: recognizer unavailable", "code": "scripted-error"}:
                  every audio-stop, or with --error-count N the first N audio-stops the server
                  receives (later ones are answered as Normal); --error-delay S answers S
                  seconds after the audio-stop (the transcription failing late).
  FailAfterStop   every connection takes the audio, then --close-delay seconds (default 6)
                  after audio-stop closes without a transcript: a handler whose transcription
                  fails each time (wyoming-faster-whisper's closes the connection and sends no
                  error event).
  StreamingFailAfterStop  the same, streaming (as Streaming) while the audio arrives.
  WakeLongName    a wake-word service: info lists the wake program "fault-wake" with model
                  "hey_fault"; after detect and audio-start, at the first audio-chunk a
                  detection whose name is "hey_fault" and 100,000 "x" (timestamp 0).
  ManyWords       as Normal, but the transcript is 20,000 one-letter words (40 KB: within the
                  bound on a segment's text, past the one on its words).
  Endpointing     a server with its own voice activity detection (as a Silero VAD in front of
                  Parakeet): an audio chunk whose largest sample exceeds 500 is speech; after
                  speech, 0.3 s of audio without it ends an utterance, answered at once (before
                  any audio-stop) with transcript {"text": "<N> bytes v<A> v<B> ..."}: N the
                  audio bytes since the previous transcript on this connection, then the
                  distinct largest samples of its speech chunks in order (a test's utterance k
                  is a constant value, so each names itself). At audio-stop the same for the
                  speech since, or, when there was none, nothing at all: the connection stays
                  open. Events are handled one at a time, in order (as wyoming's
                  AsyncEventHandler does), so describe after audio-stop is answered with info
                  after everything audio-stop caused.
  EndpointOnce    as wyoming-faster-whisper with --vad-endpointing (info: requires_external_vad
                  false): speech as in Endpointing,
                  but one utterance per connection: at its end of speech (after --endpoint-delay
                  seconds, default 0: the transcription's time, events unread meanwhile) the
                  transcript {"text": "<N> bytes v<A> ..."}, then every later audio chunk is
                  ignored; audio-stop closes the connection (with that transcript first when
                  there was none yet).
                  Both: --endpoint-delay S waits S s before each end of speech's transcript;
                  --requires-external-vad true|false overrides what info says;
                  --reset-after-transcripts N resets the first connection to send N
                  transcripts before audio-stop, right after the Nth (a server lost).

Streaming transcripts in the newest wyoming on PyPI (1.10.2; added in 1.7.0), wyoming/asr.py
and its README, "Speech to Text" / "Streaming":
  -> transcribe (optional), audio-start, audio-chunk ...
  <- transcript-start   {"language"?: str, "context"?: object}   (TranscriptStart)
  <- transcript-chunk   {"text": str}  "part of transcript": a delta, not the text so far
                                                                  (TranscriptChunk)
  -> audio-stop
  <- transcript         {"text": str, "language"?, "context"?}  "sent for backwards
                                                                  compatibility": the whole text
  <- transcript-stop    no data                                  (TranscriptStop)
and an asr program announces it with "supports_transcript_streaming": true in info (default
false). wyoming-faster-whisper 3.8.1 sends none of these (one transcript after audio-stop, for
every engine it has); error {"text", "code"?} is wyoming's error event.
"""
import argparse
import json
import os
import socket
import stat
import struct
import sys
import threading
import time

VERSION = "1.10.2"
SCENARIOS = ("Normal", "Streaming", "StreamingStopFirst", "NoInfo", "HTTP", "HugePayload",
             "HugeData", "HugeLine", "TruncatedJSON", "TruncatedData", "UnknownEvents",
             "NotUTF8", "CloseMidStream", "Error", "FailAfterStop", "StreamingFailAfterStop", "NoTranscript", "ChunkFlood", "ManyWords", "WakeLongName", "Pings", "PingsUnread",
             "Endpointing", "EndpointOnce")
MAX_LINE = 1 << 20          # what we accept from a client
MAX_DATA = 1 << 20
MAX_PAYLOAD = 1 << 24
HOLD_S = 60.0               # how long a hostile answer keeps the connection open

ARGS = None
LOG_LOCK = threading.Lock()
EVENTS_LOG = None
AUDIO_CONNECTIONS = [0]     # connections that have sent audio so far (CloseMidStream)
AUDIO_STOPS = [0]           # audio-stops received so far (Error with --error-count)
RESET_DONE = [False]        # --reset-after-transcripts: the one connection reset so far
COUNTER_LOCK = threading.Lock()


def log(msg: str) -> None:
    with LOG_LOCK:
        sys.stderr.write(f"[wyoming-fault {ARGS.scenario}] {msg}\n")
        sys.stderr.flush()


def encode(type_: str, data=None, payload: bytes = b"", **extra) -> bytes:
    header = {"type": type_, "version": VERSION}
    header.update(extra)
    body = b""
    if data:
        body = json.dumps(data, ensure_ascii=False).encode("utf-8")
        header["data_length"] = len(body)
    if payload:
        header["payload_length"] = len(payload)
    return json.dumps(header).encode("utf-8") + b"\n" + body + payload


ATTRIBUTION = {"name": "libspeechclient tests", "url": "https://example.invalid/"}


def info_data(streaming: bool, external_vad: bool = True) -> dict:
    attribution = ATTRIBUTION
    return {
        "asr": [{
            "name": "fault-asr",
            "attribution": attribution,
            "installed": True,
            "description": f"scripted Wyoming ASR server ({ARGS.scenario})",
            "version": "1.0",
            "models": [{
                "name": "fault-model",
                "attribution": attribution,
                "installed": True,
                "description": "counts audio bytes",
                "version": "1.0",
                "languages": ["en"],
            }],
            "supports_transcript_streaming": streaming,
            "requires_external_vad": external_vad,
        }],
        "tts": [], "handle": [], "intent": [], "wake": [], "mic": [], "snd": [],
    }


class ClientGone(Exception):
    pass


class Conn:
    def __init__(self, sock: socket.socket, index: int):
        self.sock = sock
        self.index = index
        self.buf = bytearray()
        self.closed = False

    # -- reading the client's events -----------------------------------------------------
    def _fill(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            raise ClientGone()
        self.buf += chunk

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_line(self, limit: int = MAX_LINE) -> bytes:
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[:nl + 1]
                return line
            if len(self.buf) > limit:
                raise ValueError(f"client header line over {limit} bytes")
            self._fill()

    def read_event(self):
        line = self.read_line()
        header = json.loads(line)
        if not isinstance(header, dict) or not isinstance(header.get("type"), str):
            raise ValueError(f"client header without a type: {line[:200]!r}")
        data = header.get("data") or {}
        data_length = int(header.get("data_length") or 0)
        payload_length = int(header.get("payload_length") or 0)
        if not 0 <= data_length <= MAX_DATA or not 0 <= payload_length <= MAX_PAYLOAD:
            raise ValueError(f"client event lengths out of bounds: {header!r}")
        if data_length:
            extra = json.loads(self._take(data_length))
            if not isinstance(extra, dict) or not isinstance(data, dict):
                raise ValueError(f"client event data is not an object: {header!r}")
            data = dict(data)
            data.update(extra)
        if not isinstance(data, dict):
            raise ValueError(f"client event data is not an object: {header!r}")
        payload = self._take(payload_length) if payload_length else b""
        if EVENTS_LOG is not None:
            with LOG_LOCK:
                EVENTS_LOG.write(json.dumps({"conn": self.index, "type": header["type"], "data": data,
                                             "payload_length": len(payload)}) + "\n")
                EVENTS_LOG.flush()
        return header["type"], data, payload

    # -- writing -------------------------------------------------------------------------
    def send(self, raw: bytes) -> None:
        try:
            self.sock.sendall(raw)
        except OSError:
            raise ClientGone()

    def event(self, type_: str, data=None, payload: bytes = b"", **extra) -> None:
        self.send(encode(type_, data, payload, **extra))

    def close(self, reset: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if reset:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def hold(self, seconds: float = HOLD_S) -> None:
        """Keeps the connection open, reading and dropping what comes, until the client closes
        or `seconds` pass."""
        self.sock.settimeout(0.5)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if not self.sock.recv(65536):
                    return
            except socket.timeout:
                continue
            except OSError:
                return


# ---------------------------------------------------------------------------------------------
# Scenarios

def serve_asr(c: Conn, streaming: bool = False, stop_first: bool = False, unknown: bool = False,
              not_utf8: bool = False, error: bool = False, close_mid_stream: bool = False,
              no_transcript: bool = False, chunk_flood: bool = False, pings: bool = False,
              fail_after_stop: bool = False, many_words: bool = False) -> None:
    """The event loop of a well-behaved ASR server, with the scenario's deviations.
    chunk_flood: at the first audio, 40 transcript-chunk events of 8 KiB of blanks (no words).
    pings: at audio-start, 8 pings of 64 KiB of text; once their 8 pongs are in, a streamed
    transcript "pongs8"."""
    pongs = 0
    audio_bytes = 0
    bytes_per_second = 32000
    in_audio = False
    started_stream = False
    chunks_sent = 0
    parts = []
    counted_audio_connection = False
    closing_this = False
    while True:
        type_, data, payload = c.read_event()
        if type_ == "describe":
            if unknown:
                c.event("x-future-event", {"hello": "from the future", "n": 1})
                c.event("x-binary-event", {"what": "payload"}, b"\x00\x01\x02" * 100)
                c.send(json.dumps({"type": "x-extra-fields", "version": VERSION, "data": {"a": 1},
                                   "future_field": [1, 2, 3], "payload_length": 0}).encode() + b"\n")
            c.event("info", info_data(streaming))
            log(f"conn {c.index}: describe -> info")
        elif type_ == "ping":
            c.event("pong", {"text": data.get("text")} if data.get("text") else None)
        elif type_ == "pong" and pings:
            pongs += 1
            if pongs == 8:
                c.event("transcript-start", {"language": "en"})
                c.event("transcript-chunk", {"text": "pongs8"})
        elif type_ == "transcribe":
            log(f"conn {c.index}: transcribe {data!r}")
        elif type_ == "audio-start":
            rate = int(data.get("rate") or 16000)
            width = int(data.get("width") or 2)
            channels = int(data.get("channels") or 1)
            bytes_per_second = max(rate * width * channels, 1)
            audio_bytes = 0
            in_audio = True
            started_stream = False
            chunks_sent = 0
            parts = []
            log(f"conn {c.index}: audio-start {data!r}")
            if pings:
                for i in range(8):
                    c.event("ping", {"text": "p" * 65536})
        elif type_ == "audio-chunk":
            if close_mid_stream and not counted_audio_connection:
                counted_audio_connection = True
                with COUNTER_LOCK:
                    AUDIO_CONNECTIONS[0] += 1
                    closing_this = AUDIO_CONNECTIONS[0] <= ARGS.close_count
            if chunk_flood and in_audio and not started_stream:
                started_stream = True
                c.event("transcript-start", {"language": "en"})
                for i in range(40):
                    c.event("transcript-chunk", {"text": " " * 8192})
            audio_bytes += len(payload)
            if closing_this and audio_bytes >= bytes_per_second:
                log(f"conn {c.index}: closing after {audio_bytes} bytes of audio "
                    f"({'RST' if ARGS.reset else 'FIN'})")
                c.close(reset=ARGS.reset)
                return
            if streaming and in_audio:
                if not started_stream:
                    started_stream = True
                    c.event("transcript-start", {"language": "en"})
                while audio_bytes >= (chunks_sent + 1) * bytes_per_second // 2:
                    chunks_sent += 1
                    text = ("" if not parts else " ") + f"part{chunks_sent}"
                    parts.append(text)
                    c.event("transcript-chunk", {"text": text})
        elif type_ == "audio-stop":
            log(f"conn {c.index}: audio-stop after {audio_bytes} bytes of audio")
            in_audio = False
            if no_transcript:  # answers describe and takes the audio, then never answers
                continue
            if fail_after_stop:
                time.sleep(ARGS.close_delay)
                log(f"conn {c.index}: closing {ARGS.close_delay} s after audio-stop, no transcript")
                c.close()
                return
            failing = error
            if error and ARGS.error_count is not None:
                with COUNTER_LOCK:
                    AUDIO_STOPS[0] += 1
                    failing = AUDIO_STOPS[0] <= ARGS.error_count
            if failing:
                time.sleep(ARGS.error_delay)
                log(f"conn {c.index}: answering audio-stop with an error")
                c.event("error", {"text": "scripted failure: recognizer unavailable",
                                  "code": "scripted-error"})
                continue
            text = f"{audio_bytes} bytes"
            if ARGS.transcript_delay > 0:
                time.sleep(ARGS.transcript_delay)  # a recognizer slow to finish (Whisper on a small machine)
            if many_words:
                text = " ".join(["w"] * 20000)
            if streaming:
                if not started_stream:
                    c.event("transcript-start", {"language": "en"})
                last = ("" if not parts else " ") + text
                parts.append(last)
                c.event("transcript-chunk", {"text": last})
                full = "".join(parts)
                if stop_first:
                    c.event("transcript-stop")
                c.event("transcript", {"text": full, "language": "en"})
                if not stop_first:
                    c.event("transcript-stop")
            elif unknown:
                c.event("x-transcript-alternatives", {"alternatives": [{"text": "nothing", "confidence": 0.1}]})
                c.event("x-binary-event", {"what": "payload"}, os.urandom(1000))
                c.event("transcript", {"text": text})
            elif not_utf8:
                body = b'{"text": "caf\xc3 \xff\xfe ' + text.encode() + b'"}'
                c.send(json.dumps({"type": "transcript", "version": VERSION,
                                   "data_length": len(body)}).encode() + b"\n" + body)
            else:
                c.event("transcript", {"text": text})
            if ARGS.close_after_transcript:
                c.close()
                return
        else:
            log(f"conn {c.index}: ignored event {type_!r}")


class Utterances:
    """The Endpointing scenarios' detector: a chunk whose largest sample exceeds 500 is speech;
    after speech, 0.3 s without it ends the utterance. Its text: the audio bytes since the last
    one, then the distinct largest samples of its speech chunks in order."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.since, self.values, self.quiet = 0, [], 0

    def text(self) -> str:
        return " ".join([f"{self.since} bytes"] + [f"v{v}" for v in self.values])

    def take(self, payload: bytes) -> bool:
        """Counts a chunk; whether it ended an utterance."""
        self.since += len(payload)
        n = len(payload) // 2
        loudest = max((abs(v) for v in struct.unpack(f"<{n}h", payload[:2 * n])), default=0)
        if loudest > 500:
            if loudest not in self.values:
                self.values.append(loudest)
            self.quiet = 0
        elif self.values:
            self.quiet += len(payload)
            return self.quiet >= 32000 * 3 // 10
        return False


def serve_endpointing(c: Conn, once: bool = False) -> None:
    """The Endpointing scenario, or with `once` EndpointOnce (see the docstring)."""
    u = Utterances()
    done = False        # once: the utterance was answered; the rest is ignored
    says = {"true": True, "false": False}.get(ARGS.requires_external_vad, not once)
    answered = 0        # transcripts before audio-stop on this connection
    while True:
        type_, data, payload = c.read_event()
        if type_ == "describe":
            c.event("info", info_data(False, external_vad=says))
        elif type_ == "audio-start":
            u.reset()
            done = False
        elif type_ == "audio-chunk" and not done:
            if u.take(payload):
                time.sleep(ARGS.endpoint_delay)
                done = once
                log(f"conn {c.index}: end of speech: {u.text()}{'; the rest is ignored' if once else ''}")
                c.event("transcript", {"text": u.text()})
                u.reset()
                answered += 1
                if ARGS.reset_after_transcripts and answered == ARGS.reset_after_transcripts:
                    with COUNTER_LOCK:
                        first = not RESET_DONE[0]
                        RESET_DONE[0] = True
                    if first:
                        log(f"conn {c.index}: reset after {answered} transcript(s) (--reset-after-transcripts)")
                        c.close(reset=True)
                        return
        elif type_ == "audio-chunk":
            pass        # once, after the answer: ignored, as wyoming-faster-whisper does
        elif type_ == "audio-stop":
            if once:
                if not done:
                    c.event("transcript", {"text": u.text()})
                log(f"conn {c.index}: audio-stop: closing")
                c.close()
                return
            if u.values:
                log(f"conn {c.index}: audio-stop: {u.text()}")
                c.event("transcript", {"text": u.text()})
            else:
                log(f"conn {c.index}: audio-stop with no speech since the last transcript: no answer")
            u.reset()
        elif type_ == "ping":
            c.event("pong", {"text": data.get("text")} if data.get("text") else None)
        else:
            log(f"conn {c.index}: ignored event {type_!r}")


def first_bytes(c: Conn, timeout: float = 2.0) -> None:
    """Waits for the client's first line (or bytes), so the answer is to a request."""
    c.sock.settimeout(timeout)
    try:
        c.read_line()
    except (socket.timeout, ValueError):
        pass
    finally:
        c.sock.settimeout(None)


# The scenarios that are a well-behaved ASR server with deviations: serve_asr's flags.
ASR_SCENARIOS = {
    "Normal": {},
    "Streaming": {"streaming": True},
    "StreamingStopFirst": {"streaming": True, "stop_first": True},
    "UnknownEvents": {"unknown": True},
    "NotUTF8": {"not_utf8": True},
    "Error": {"error": True},
    "CloseMidStream": {"close_mid_stream": True},
    "FailAfterStop": {"fail_after_stop": True},
    "StreamingFailAfterStop": {"streaming": True, "fail_after_stop": True},
    "NoTranscript": {"no_transcript": True},
    "ChunkFlood": {"chunk_flood": True},
    "ManyWords": {"many_words": True},
    "Pings": {"pings": True},
}


def serve_wake_long_name(c: Conn) -> None:
    """WakeLongName: a wake-word service whose one detection has a 100 KB name."""
    detected = False
    while True:
        type_, data, payload = c.read_event()
        if type_ == "describe":
            info = info_data(False)
            info["asr"] = []
            info["wake"] = [{"name": "fault-wake", "description": "scripted", "installed": True,
                             "attribution": ATTRIBUTION, "version": "1.0",
                             "models": [{"name": "hey_fault", "description": "", "installed": True,
                                         "attribution": ATTRIBUTION, "version": "1.0",
                                         "languages": ["en"], "phrase": "hey fault"}]}]
            c.event("info", info)
        elif type_ == "audio-chunk" and not detected:
            detected = True
            c.event("detection", {"name": "hey_fault" + "x" * 100000, "timestamp": 0})


def run_scenario(c: Conn) -> None:
    s = ARGS.scenario
    if s in ASR_SCENARIOS:
        serve_asr(c, **ASR_SCENARIOS[s])
    elif s == "WakeLongName":
        serve_wake_long_name(c)
    elif s == "PingsUnread":
        # At audio-start, 8 pings of 3 MiB of text each, and nothing read after them: the
        # client's answers pile up unsent.
        while True:
            type_, data, payload = c.read_event()
            if type_ == "describe":
                c.event("info", info_data(False))
            elif type_ == "audio-start":
                for _ in range(8):
                    c.event("ping", {"text": "p" * (3 << 20)})
                time.sleep(HOLD_S)
                return
    elif s == "Endpointing":
        serve_endpointing(c)
    elif s == "EndpointOnce":
        serve_endpointing(c, once=True)
    elif s == "NoInfo":
        c.hold(HOLD_S * 10)
    elif s == "HTTP":
        first_bytes(c)
        body = b"Bad Request\n"
        c.send(b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: "
               + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        c.close()
    elif s in ("HugePayload", "HugeData"):
        first_bytes(c)
        field = "payload_length" if s == "HugePayload" else "data_length"
        c.send(json.dumps({"type": "info", "version": VERSION, field: 1 << 40}).encode() + b"\n")
        c.send(b"\x00" * 65536)
        c.hold()
    elif s == "HugeLine":
        first_bytes(c)
        head = b'{"type": "info", "version": "' + VERSION.encode() + b'", "data": {"x": "'
        c.send(head)
        block = b"a" * 65536
        left = 10 * 1000 * 1000 - len(head)
        while left > 0:
            c.send(block[:left])
            left -= len(block)
        log(f"conn {c.index}: sent a 10 MB header line without a newline")
        c.hold()
    elif s == "TruncatedJSON":
        first_bytes(c)
        c.send(b'{"type": "info", "version": "' + VERSION.encode() + b'", "data": {"asr": [\n')
        c.hold()
    elif s == "TruncatedData":
        first_bytes(c)
        body = b'{"asr": [{"name": "fault-asr", "models": [{"name": "fault-'
        c.send(json.dumps({"type": "info", "version": VERSION, "data_length": len(body)}).encode()
               + b"\n" + body)
        c.hold()
    else:
        raise AssertionError(s)


def handle(sock: socket.socket, index: int) -> None:
    c = Conn(sock, index)
    log(f"conn {index}: accepted")
    try:
        run_scenario(c)
    except ClientGone:
        log(f"conn {index}: client closed")
    except (ValueError, OSError) as e:
        log(f"conn {index}: {type(e).__name__}: {e}")
    finally:
        c.close()


def watch_stdin() -> None:
    """Exit when stdin, a pipe or socket, closes (the test that started us is gone)."""
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return

    def run():
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        os._exit(0)

    threading.Thread(target=run, daemon=True).start()


def main() -> None:
    global ARGS, EVENTS_LOG
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", default="Normal", choices=SCENARIOS)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--unix", help="listen on this unix socket path instead of TCP")
    p.add_argument("--close-after-transcript", action="store_true",
                   help="close each connection after its transcript (as wyoming-faster-whisper does)")
    p.add_argument("--endpoint-delay", type=float, default=0.0,
                   help="Endpointing, EndpointOnce: seconds from the end of speech to its transcript")
    p.add_argument("--requires-external-vad", choices=("true", "false"),
                   help="Endpointing, EndpointOnce: what info says (default: true for Endpointing, false for EndpointOnce)")
    p.add_argument("--reset-after-transcripts", type=int, default=0,
                   help="Endpointing, EndpointOnce: the first connection to send this many transcripts before audio-stop is reset right after the last")
    p.add_argument("--error-count", type=int, default=None,
                   help="Error: only the first N audio-stops are answered with an error")
    p.add_argument("--error-delay", type=float, default=0.0,
                   help="Error: seconds after audio-stop before the error")
    p.add_argument("--close-count", type=int, default=1,
                   help="CloseMidStream: how many audio connections are cut (default 1)")
    p.add_argument("--reset", action="store_true", help="CloseMidStream: close with an RST")
    p.add_argument("--close-delay", type=float, default=6.0, help="FailAfterStop: seconds after audio-stop")
    p.add_argument("--events-log", help="write every received event as a JSON line here")
    p.add_argument("--transcript-delay", type=float, default=0.0,
                   help="Normal: seconds between audio-stop and the transcript")
    ARGS = p.parse_args()
    if ARGS.events_log:
        EVENTS_LOG = open(ARGS.events_log, "a", encoding="utf-8")
    if ARGS.unix:
        try:
            os.unlink(ARGS.unix)
        except FileNotFoundError:
            pass
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(ARGS.unix)
        where = f"unix:{ARGS.unix}"
    else:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((ARGS.host, ARGS.port))
        where = "%s:%d" % listener.getsockname()[:2]
    listener.listen(64)
    watch_stdin()
    print(f"listening on {where}", flush=True)
    index = 0
    while True:
        sock, _ = listener.accept()
        index += 1
        threading.Thread(target=handle, args=(sock, index), daemon=True).start()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
