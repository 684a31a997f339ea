#!/usr/bin/env python3
"""A Wyoming speech recognizer with its own endpointing, built on the real `wyoming` library
(its AsyncServer and AsyncEventHandler) and the real faster-whisper, as servers that put a voice
activity detector in front of a recognizer do (Silero VAD + Parakeet and the like): each end of
speech it hears is transcribed and sent as a `transcript` at once, while the audio still comes;
at `audio-stop` the speech since the last one is, or nothing when there was none. The
connection stays open after it.

Run with the Python of the wyoming-faster-whisper venv (.venv-wyoming), which has both:

    .venv-wyoming/bin/python Tests/peers/wyoming_vad_asr.py --uri tcp://127.0.0.1:PORT \
        --model MODEL_DIR [--cpu-threads 2]

Its info does not say `requires_external_vad: false` (the Parakeet example this follows does
not either): a client learns that it endpoints only from its transcripts.

The detector is plain energy: 30 ms frames, speech above RMS 400 (about -38 dBFS); an utterance
is at least 0.2 s of speech and ends after 0.6 s without it, or at 25 s. Events are handled one
at a time in order (wyoming's AsyncEventHandler), so a `describe` after `audio-stop` is answered
after everything `audio-stop` caused.
"""
import argparse
import asyncio
import logging
import math
import struct
from functools import partial

from faster_whisper import WhisperModel
from wyoming.asr import Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info
from wyoming.server import AsyncEventHandler, AsyncServer

RATE = 16000
FRAME = 480                    # 30 ms
SPEECH_RMS = 400
END_FRAMES = 20                # 0.6 s without speech ends an utterance
MIN_SPEECH_FRAMES = 7          # 0.2 s
MAX_FRAMES = 25 * 1000 // 30   # 25 s

log = logging.getLogger("wyoming-vad-asr")


class Recognizer:
    def __init__(self, model_dir: str, cpu_threads: int):
        self.model = WhisperModel(model_dir, device="cpu", compute_type="int8", cpu_threads=cpu_threads,
                                  local_files_only=True)
        self.lock = asyncio.Lock()

    def transcribe(self, pcm: bytes) -> str:
        import numpy as np
        audio = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0
        segments, _ = self.model.transcribe(audio, beam_size=1, language="en")
        return " ".join(s.text.strip() for s in segments).strip()


# --drop-after-transcripts N: transcripts sent at an end of speech (before audio-stop) so far,
# on all connections, and whether the one connection to be dropped was.
SENT = {"transcripts": 0, "dropped": False}


class Handler(AsyncEventHandler):
    def __init__(self, recognizer: Recognizer, info: Info, drop_after: int, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recognizer = recognizer
        self.info = info
        self.drop_after = drop_after
        self.dropped = False
        self.reset()

    def reset(self):
        self.pending = b""          # samples not yet a whole frame
        self.utterance = bytearray()
        self.speech_frames = 0
        self.quiet_frames = 0

    async def utterance_done(self, why: str):
        pcm = bytes(self.utterance)
        speech = self.speech_frames
        self.utterance = bytearray()
        self.speech_frames = 0
        self.quiet_frames = 0
        if speech < MIN_SPEECH_FRAMES:
            return
        async with self.recognizer.lock:
            text = await asyncio.get_running_loop().run_in_executor(None, self.recognizer.transcribe, pcm)
        log.info("%s: %.2f s -> %r", why, len(pcm) / 2 / RATE, text)
        if text:
            await self.write_event(Transcript(text=text).event())
            SENT["transcripts"] += why == "end of speech"
            if SENT["transcripts"] == self.drop_after and not SENT["dropped"]:
                # A server lost right after a transcript: the connection is reset.
                SENT["dropped"] = self.dropped = True
                log.info("dropping the connection after transcript %d (--drop-after-transcripts)", self.drop_after)
                self.writer.transport.abort()

    async def take(self, pcm: bytes):
        data = self.pending + pcm
        whole = len(data) // (2 * FRAME) * 2 * FRAME
        self.pending = data[whole:]
        for at in range(0, whole, 2 * FRAME):
            frame = data[at:at + 2 * FRAME]
            samples = struct.unpack(f"<{FRAME}h", frame)
            rms = math.sqrt(sum(s * s for s in samples) / FRAME)
            if rms > SPEECH_RMS:
                self.speech_frames += 1
                self.quiet_frames = 0
                self.utterance += frame
            elif self.speech_frames:
                self.quiet_frames += 1
                self.utterance += frame
                if self.quiet_frames >= END_FRAMES:
                    await self.utterance_done("end of speech")
            if len(self.utterance) >= MAX_FRAMES * 2 * FRAME:
                await self.utterance_done("longest utterance")

    async def handle_event(self, event: Event) -> bool:
        if self.dropped:
            return False
        if Describe.is_type(event.type):
            await self.write_event(self.info.event())
        elif AudioStart.is_type(event.type):
            self.reset()
        elif AudioChunk.is_type(event.type):
            chunk = AudioChunk.from_event(event)
            if (chunk.rate, chunk.width, chunk.channels) != (RATE, 2, 1):
                log.error("audio must be 16 kHz mono s16, got %s", (chunk.rate, chunk.width, chunk.channels))
                return False
            await self.take(chunk.audio)
            return not self.dropped
        elif AudioStop.is_type(event.type):
            self.utterance += self.pending
            self.pending = b""
            await self.utterance_done("audio-stop")
            self.reset()
        return True


async def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--uri", required=True)
    p.add_argument("--model", required=True, help="a CTranslate2 Whisper model directory")
    p.add_argument("--cpu-threads", type=int, default=2)
    p.add_argument("--drop-after-transcripts", type=int, default=0,
                   help="reset the connection right after the Nth transcript at an end of speech (once): a server lost")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    attribution = Attribution(name="libspeechclient tests", url="https://example.invalid")
    info = Info(asr=[AsrProgram(name="vad-asr", attribution=attribution, installed=True,
                                description="faster-whisper behind an energy endpointer", version="1",
                                models=[AsrModel(name="tiny.en", attribution=attribution, installed=True,
                                                 description="Whisper tiny.en", version="1", languages=["en"])])])
    recognizer = Recognizer(args.model, args.cpu_threads)
    server = AsyncServer.from_uri(args.uri)
    log.info("ready on %s", args.uri)
    await server.run(partial(Handler, recognizer, info, args.drop_after_transcripts))


if __name__ == "__main__":
    asyncio.run(main())
