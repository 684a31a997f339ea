"""The reference server: IdentityAPI/Login (v2) and SLU/Stream over grpcio."""
from __future__ import annotations

import array
import dataclasses
import datetime
import logging
import math
import queue
import threading
import time
import uuid
from typing import Iterator, List, Optional

import grpc

from ._proto.speechly.identity.v2 import identity_pb2, identity_pb2_grpc
from ._proto.speechly.slu.v1 import slu_pb2, slu_pb2_grpc
from . import tokens
from .intents import Intents

log = logging.getLogger("speechclient_server")

RATE = 16000
FRAME = 160                      # 10 ms at 16 kHz
SPEECH_RMS = 300.0               # PCM16 RMS above which a 10 ms frame counts as speech
SEGMENT_SILENCE_MS = 600         # this much silence ends a segment
PRE_ROLL_MS = 200                # audio kept before the detected start of speech
CONTEXT_LIMIT_S = 300            # the protocol's 5-minute context limit


@dataclasses.dataclass
class Settings:
    secret: bytes
    token_validity_s: int = 3600
    allowed_app_ids: Optional[List[str]] = None
    rtt_interval_s: float = 5.0


class Identity(identity_pb2_grpc.IdentityAPIServicer):
    def __init__(self, settings: Settings):
        self.settings = settings

    def Login(self, request, context):
        if not request.device_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "device_id is required")
        scope = request.WhichOneof("scope")
        if scope == "application":
            if not request.application.app_id:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "application.app_id is required")
            allowed = self.settings.allowed_app_ids
            if allowed is not None and request.application.app_id not in allowed:
                context.abort(grpc.StatusCode.PERMISSION_DENIED, f"unknown app id '{request.application.app_id}'")
            claims = {"appId": request.application.app_id}
        elif scope == "project":
            if not request.project.project_id:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "project.project_id is required")
            claims = {"projectId": request.project.project_id}
        else:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a scope (application or project) is required")
        claims.update(deviceId=request.device_id, scope="slu")
        issued = tokens.issue(self.settings.secret, claims, self.settings.token_validity_s)
        expires = datetime.datetime.fromtimestamp(issued["exp"], datetime.timezone.utc)
        return identity_pb2.LoginResponse(
            token=issued["token"], valid_for_s=self.settings.token_validity_s,
            expires_at_epoch=issued["exp"], expires_at=expires.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _rms(pcm: bytes) -> float:
    samples = array.array("h", pcm)
    if not samples:
        return 0.0
    return math.sqrt(sum(s * s for s in samples) / len(samples))


class Segment:
    """One stretch of speech inside a context."""

    def __init__(self, recognizer, segment_id: int, start_sample: int):
        self.recognizer = recognizer
        self.id = segment_id
        self.start_sample = start_sample
        self.silence = 0
        self.pending = bytearray()
        self.tentative: List[str] = []


class Context:
    def __init__(self, engine, vad: bool):
        self.id = str(uuid.uuid4())
        self.engine = engine
        self.vad = vad
        self.samples = 0
        self.next_segment = 0
        self.segment: Optional[Segment] = None
        self.pre_roll = bytearray()


class SLU(slu_pb2_grpc.SLUServicer):
    def __init__(self, settings: Settings, engine, intents: Intents, vad: bool = True):
        self.settings, self.engine, self.intents, self.vad = settings, engine, intents, vad

    # -- authentication

    def _authorize(self, context) -> None:
        auth = dict(context.invocation_metadata()).get("authorization", "")
        if not auth.startswith("Bearer "):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing 'authorization: Bearer <token>'")
        try:
            claims = tokens.verify(self.settings.secret, auth[len("Bearer "):])
        except tokens.TokenError as e:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
        if "slu" not in str(claims.get("scope", "")).split():
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "token scope does not include slu")

    # -- the stream

    def Stream(self, request_iterator, context) -> Iterator[slu_pb2.SLUResponse]:
        self._authorize(context)
        inbox: "queue.Queue" = queue.Queue()

        def read() -> None:
            try:
                for r in request_iterator:
                    inbox.put(r)
            except Exception:  # the client went away; the main loop sees the sentinel
                pass
            inbox.put(None)

        threading.Thread(target=read, daemon=True).start()
        configured = False
        ctx: Optional[Context] = None
        ended_by_server = False
        rtt_id = 0
        next_rtt = time.monotonic() + self.settings.rtt_interval_s
        while True:
            wait = max(0.0, next_rtt - time.monotonic())
            try:
                req = inbox.get(timeout=wait)
            except queue.Empty:
                rtt_id += 1
                next_rtt = time.monotonic() + self.settings.rtt_interval_s
                yield slu_pb2.SLUResponse(audio_context=ctx.id if ctx else "",
                                          rtt_request=slu_pb2.RoundTripMeasurementRequest(id=rtt_id))
                continue
            if req is None:
                if ctx is not None:
                    yield from self._finish(ctx)
                return
            kind = req.WhichOneof("streaming_request")
            if not configured:
                if kind != "config":
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the first message must be config")
                self._check_config(req.config, context)
                configured = True
                continue
            if kind == "config":
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "config may be sent only once, first")
            elif kind == "start" or (kind == "event" and req.event.event == slu_pb2.SLUEvent.START):
                if ctx is not None:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, "start while a context is open: stop it first")
                ctx = Context(self.engine, self.vad)
                ended_by_server = False
                yield slu_pb2.SLUResponse(audio_context=ctx.id, started=slu_pb2.SLUStarted())
            elif kind == "stop" or (kind == "event" and req.event.event == slu_pb2.SLUEvent.STOP):
                if ctx is None:
                    if ended_by_server:
                        ended_by_server = False
                        continue
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, "stop without a started context")
                yield from self._finish(ctx)
                ctx = None
            elif kind == "audio":
                if ctx is None:
                    if ended_by_server:
                        continue
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, "audio before start")
                yield from self._audio(ctx, req.audio)
                if ctx.samples > CONTEXT_LIMIT_S * RATE:
                    yield from self._finish(ctx, error=("context_too_long",
                                                        f"an audio context may last {CONTEXT_LIMIT_S} s"))
                    ctx = None
                    ended_by_server = True
            elif kind == "rtt_response":
                continue

    def _check_config(self, config, context) -> None:
        if config.encoding != slu_pb2.SLUConfig.LINEAR16:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"encoding {config.encoding} is not LINEAR16")
        if config.channels != 1:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"channels must be 1, got {config.channels}")
        if config.sample_rate_hertz != RATE:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"sample_rate_hertz must be {RATE} for this server, got {config.sample_rate_hertz}")

    # -- recognition

    def _audio(self, ctx: Context, pcm: bytes):
        if len(pcm) % 2:
            pcm = pcm[:-1]
        if not ctx.vad:  # sink: one empty tentative per chunk, no VAD cost
            ctx.samples += len(pcm) // 2
            yield slu_pb2.SLUResponse(audio_context=ctx.id, segment_id=0,
                                      tentative_transcript=slu_pb2.SLUTentativeTranscript())
            return
        for off in range(0, len(pcm), FRAME * 2):
            frame = pcm[off:off + FRAME * 2]
            speech = _rms(frame) > SPEECH_RMS
            seg = ctx.segment
            if seg is None:
                if speech:
                    seg = Segment(self.engine.recognizer(), ctx.next_segment,
                                  ctx.samples - len(ctx.pre_roll) // 2)
                    ctx.next_segment += 1
                    ctx.segment = seg
                    seg.pending.extend(ctx.pre_roll)
                    seg.pending.extend(frame)
                    ctx.pre_roll.clear()
                else:
                    ctx.pre_roll.extend(frame)
                    del ctx.pre_roll[:max(0, len(ctx.pre_roll) - PRE_ROLL_MS * RATE // 1000 * 2)]
            else:
                seg.pending.extend(frame)
                seg.silence = 0 if speech else seg.silence + len(frame) // 2
                if seg.silence >= SEGMENT_SILENCE_MS * RATE // 1000:
                    yield from self._feed(ctx, seg)
                    yield from self._end_segment(ctx, seg)
            ctx.samples += len(frame) // 2
        if ctx.segment is not None:
            yield from self._feed(ctx, ctx.segment)

    def _feed(self, ctx: Context, seg: Segment):
        if not seg.pending:
            return
        words = seg.recognizer.feed(bytes(seg.pending))
        seg.pending.clear()
        if words is None or words == seg.tentative:
            return
        seg.tentative = words
        now_ms = ctx.samples * 1000 // RATE
        start_ms = seg.start_sample * 1000 // RATE
        tw = [slu_pb2.SLUTranscript(word=w, index=i, start_time=start_ms, end_time=now_ms) for i, w in enumerate(words)]
        yield slu_pb2.SLUResponse(audio_context=ctx.id, segment_id=seg.id,
                                  tentative_transcript=slu_pb2.SLUTentativeTranscript(
                                      tentative_transcript=" ".join(words), tentative_words=tw))
        match = self.intents.match(words)
        if match:
            yield slu_pb2.SLUResponse(audio_context=ctx.id, segment_id=seg.id,
                                      tentative_intent=slu_pb2.SLUIntent(intent=match.intent))
            yield slu_pb2.SLUResponse(audio_context=ctx.id, segment_id=seg.id,
                                      tentative_entities=slu_pb2.SLUTentativeEntities(tentative_entities=[
                                          slu_pb2.SLUEntity(entity=t, value=v, start_position=s, end_position=e)
                                          for t, v, s, e in match.entities]))

    def _end_segment(self, ctx: Context, seg: Segment):
        ctx.segment = None
        words = seg.recognizer.finish()
        if not words and not seg.tentative:
            return
        offset = seg.start_sample * 1000 // RATE
        for i, (w, s, e) in enumerate(words):
            yield slu_pb2.SLUResponse(audio_context=ctx.id, segment_id=seg.id, transcript=slu_pb2.SLUTranscript(
                word=w, index=i, start_time=offset + s, end_time=offset + e))
        match = self.intents.match([w for w, _, _ in words]) if words else None
        if match:
            for t, v, s, e in match.entities:
                yield slu_pb2.SLUResponse(audio_context=ctx.id, segment_id=seg.id, entity=slu_pb2.SLUEntity(
                    entity=t, value=v, start_position=s, end_position=e))
            yield slu_pb2.SLUResponse(audio_context=ctx.id, segment_id=seg.id,
                                      intent=slu_pb2.SLUIntent(intent=match.intent))
        yield slu_pb2.SLUResponse(audio_context=ctx.id, segment_id=seg.id, segment_end=slu_pb2.SLUSegmentEnd())

    def _finish(self, ctx: Context, error=None):
        if ctx.segment is not None:
            seg = ctx.segment
            yield from self._feed(ctx, seg)
            yield from self._end_segment(ctx, seg)
        finished = slu_pb2.SLUFinished()
        if error:
            finished.error.code, finished.error.message = error
        yield slu_pb2.SLUResponse(audio_context=ctx.id, finished=finished)
