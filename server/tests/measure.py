"""Word error rate and latency of the reference server, measured through its CLI and grpcio.

    python server/tests/measure.py [--engine pocketsphinx] [--paced] [server options...]

Speech is synthesized at run time with espeak-ng (en-us, 160 wpm) and sox (16 kHz mono PCM16),
one context per sentence, on one stream, sent in 100 ms chunks followed at once by `stop`.

- WER: word-level Levenshtein distance of the final words (all segments of the context, in
  order) against the sentence, summed over the sentences, over the number of reference words.
- first tentative: from sending the first audio chunk to the first non-empty tentative
  transcript. Meaningful with --paced (chunks at real time, as from a microphone).
- final: from sending the last audio chunk (and stop) to the last segment_end of the context.

test_measure.py runs this and asserts bounds; the figures are printed either way."""
from __future__ import annotations

import argparse
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence

import grpc

if __name__ == "__main__":  # run by hand: measure this source tree (pytest's conftest does the same)
    _SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, _SOURCE)
    os.environ["PYTHONPATH"] = os.pathsep.join([_SOURCE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

from speechclient_server._proto.speechly.identity.v2 import identity_pb2 as idp, identity_pb2_grpc
from speechclient_server._proto.speechly.slu.v1 import slu_pb2 as slu, slu_pb2_grpc

# Commands of the bundled intents.txt: what the default JSGF grammar recognises.
SENTENCES = [
    "turn on the kitchen lights",
    "turn off the bedroom lights",
    "turn on the living room lights",
    "turn off the garage lights",
    "set a timer for five minutes",
    "set a timer for twenty minutes",
    "play some jazz music",
    "play some classical music",
    "stop the music",
    "what time is it",
]

CHUNK = 3200  # 100 ms at 16 kHz


def synthesize(text: str, rate: int = 16000) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        wav, raw = os.path.join(tmp, "s.wav"), os.path.join(tmp, "s.raw")
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", wav, text], check=True, capture_output=True)
        subprocess.run(["sox", "-R", wav, "-r", str(rate), "-c", "1", "-b", "16", "-e", "signed-integer", "-t", "raw", raw],
                       check=True, capture_output=True)
        with open(raw, "rb") as f:
            return f.read()


def word_errors(ref: Sequence[str], hyp: Sequence[str]) -> int:
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


class ServerProcess:
    """`python -m speechclient_server --port 0 ...` as a subprocess; stop() ends it (SIGTERM)."""

    def __init__(self, *args: str, host: str = "127.0.0.1"):
        self.proc = subprocess.Popen([sys.executable, "-m", "speechclient_server", "--host", host, "--port", "0", *args],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r}")
        self.address = line.split()[-1]
        self.port = int(self.address.rsplit(":", 1)[1])

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(10)
        finally:
            self.proc.stdout.close()


def login(channel, app_id: str = "measure") -> str:
    stub = identity_pb2_grpc.IdentityAPIStub(channel)
    return stub.Login(idp.LoginRequest(device_id="00000000-0000-4000-8000-000000000001",
                                       application=idp.ApplicationScope(app_id=app_id)), timeout=10).token


class Stream:
    """One SLU stream; requests are queued, responses read on a thread and timestamped."""

    def __init__(self, channel, token: str, rate: int = 16000):
        self.requests: "queue.Queue" = queue.Queue()
        self.responses: "queue.Queue" = queue.Queue()
        self.requests.put(slu.SLURequest(config=slu.SLUConfig(
            encoding=slu.SLUConfig.LINEAR16, channels=1, sample_rate_hertz=rate, language_code="en-US")))
        call = slu_pb2_grpc.SLUStub(channel).Stream(iter(self.requests.get, None),
                                                    metadata=[("authorization", f"Bearer {token}")])
        self.call = call

        def read():
            try:
                for r in call:
                    if r.HasField("rtt_request"):
                        self.requests.put(slu.SLURequest(rtt_response=slu.RoundTripMeasurementResponse(
                            id=r.rtt_request.id)))
                        continue
                    self.responses.put((time.monotonic(), r))
            except grpc.RpcError as e:
                self.responses.put((time.monotonic(), e))
            self.responses.put((time.monotonic(), None))

        threading.Thread(target=read, daemon=True).start()

    def close(self) -> None:
        self.requests.put(None)

    def context(self, pcm: bytes, paced: bool, chunk: int = CHUNK, rate: int = 16000) -> Dict:
        """Sends one context; returns its final words, intents, entities and timings."""
        self.requests.put(slu.SLURequest(start=slu.SLUStart(app_id="measure")))
        first_audio = last_audio = 0.0
        t0 = time.monotonic()
        for n, off in enumerate(range(0, len(pcm), chunk)):
            if paced:
                delay = t0 + n * chunk / 2 / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            self.requests.put(slu.SLURequest(audio=pcm[off:off + chunk]))
            last_audio = time.monotonic()
            if n == 0:
                first_audio = last_audio
        self.requests.put(slu.SLURequest(stop=slu.SLUStop()))
        out: Dict = {"words": {}, "intents": {}, "entities": {}, "tentative_at": None, "final_at": None,
                     "kinds": [], "context": None}
        while True:
            at, r = self.responses.get(timeout=60)
            if r is None or isinstance(r, Exception):
                raise RuntimeError(f"stream ended early: {r}")
            kind = r.WhichOneof("streaming_response")
            out["kinds"].append((r.segment_id, kind))
            if kind == "started":
                out["context"] = r.audio_context
            elif kind == "tentative_transcript" and r.tentative_transcript.tentative_transcript and \
                    out["tentative_at"] is None:
                out["tentative_at"] = at - first_audio
            elif kind == "transcript":
                out["words"].setdefault(r.segment_id, {})[r.transcript.index] = r.transcript
            elif kind == "intent":
                out["intents"][r.segment_id] = r.intent.intent
            elif kind == "entity":
                e = r.entity
                out["entities"].setdefault(r.segment_id, []).append(
                    (e.entity, e.value, e.start_position, e.end_position))
            elif kind == "segment_end":
                out["final_at"] = at - last_audio
            elif kind == "finished":
                break
        out["text"] = " ".join(w.word for seg in sorted(out["words"]) for _, w in sorted(out["words"][seg].items()))
        return out


def measure(channel, sentences: Sequence[str] = SENTENCES, paced: bool = False,
            speech: Optional[Dict[str, bytes]] = None) -> Dict:
    token = login(channel)
    stream = Stream(channel, token)
    errors = ref_words = 0
    rows = []
    try:
        for text in sentences:
            pcm = (speech or {}).get(text) or synthesize(text)
            r = stream.context(pcm, paced)
            e = word_errors(text.split(), r["text"].split())
            errors += e
            ref_words += len(text.split())
            rows.append(dict(ref=text, hyp=r["text"], errors=e, intents=r["intents"],
                             first_tentative_s=r["tentative_at"], final_s=r["final_at"]))
    finally:
        stream.close()
    tentative = [r["first_tentative_s"] for r in rows if r["first_tentative_s"] is not None]
    final = [r["final_s"] for r in rows if r["final_s"] is not None]
    return dict(rows=rows, wer=errors / max(1, ref_words), errors=errors, words=ref_words,
                first_tentative_median_s=statistics.median(tentative) if tentative else None,
                first_tentative_max_s=max(tentative) if tentative else None,
                final_median_s=statistics.median(final) if final else None,
                final_max_s=max(final) if final else None)


def report(result: Dict, title: str) -> str:
    lines = [title]
    for r in result["rows"]:
        ft = "-" if r["first_tentative_s"] is None else f"{r['first_tentative_s'] * 1000:.0f} ms"
        fi = "-" if r["final_s"] is None else f"{r['final_s'] * 1000:.0f} ms"
        lines.append(f"  {r['errors']} err  tentative {ft:>7}  final {fi:>7}  {r['ref']!r} -> {r['hyp']!r}")
    lines.append(f"  WER {result['wer'] * 100:.1f} % ({result['errors']}/{result['words']} words)")
    if result["first_tentative_median_s"] is not None:
        lines.append(f"  first tentative after audio start: median {result['first_tentative_median_s'] * 1000:.0f} ms, "
                     f"max {result['first_tentative_max_s'] * 1000:.0f} ms")
    if result["final_median_s"] is not None:
        lines.append(f"  final (segment_end) after the last audio: median {result['final_median_s'] * 1000:.0f} ms, "
                     f"max {result['final_max_s'] * 1000:.0f} ms")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--paced", action="store_true", help="send audio at real time (latency figures)")
    args, server_args = p.parse_known_args()
    server = ServerProcess(*server_args)
    try:
        with grpc.insecure_channel(server.address) as channel:
            result = measure(channel, paced=args.paced)
        print(report(result, f"server {' '.join(server_args) or '(defaults)'}, "
                             f"{'paced at real time' if args.paced else 'as fast as possible'}:"))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
