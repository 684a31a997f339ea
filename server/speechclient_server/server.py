"""The reference server: IdentityAPI/Login (v2, and the legacy v1) and SLU/Stream over grpcio."""
from __future__ import annotations

import dataclasses
import importlib.util
import datetime
import logging
import queue
import threading
import time
import uuid
from typing import Dict, Iterator, List, Optional, Tuple

import grpc

from ._proto.speechly.identity.v1 import identity_pb2 as identity_v1_pb2, identity_pb2_grpc as identity_v1_pb2_grpc
from ._proto.speechly.identity.v2 import identity_pb2, identity_pb2_grpc
from ._proto.speechly.slu.v1 import slu_pb2, slu_pb2_grpc
from . import tokens
from .audio import RATE, Resampler, rms
from .engines import Engine, Recognizer, Word
from .intents import Intents

log = logging.getLogger("speechclient_server")

FRAME = RATE // 100              # the silence detector looks at 10 ms frames
MIN_RATE, MAX_RATE = 8000, 48000
MAX_CHUNK = 1 << 20              # protocol.md: each audio message under 1 MB


@dataclasses.dataclass
class Settings:
    secret: bytes
    token_validity_s: int = 3600
    allowed_app_ids: Optional[List[str]] = None
    rtt_interval_s: float = 5.0
    context_limit_s: float = 300.0   # protocol.md: one audio context lasts at most 5 minutes
    speech_rms: float = 300.0        # PCM16 RMS above which a 10 ms frame is speech
    segment_silence_ms: int = 600    # this much silence ends a segment
    pre_roll_ms: int = 200           # audio kept from before the detected start of speech
    pace: float = 0.0                # seconds of audio recognised per second, across all streams (0: no limit)


class Pacer:
    """Slower hardware, deterministically: all the server's streams together recognise at most
    `pace` seconds of audio per second of wall time (a Raspberry Pi running Whisper behind real
    time, whose lag grows with the recording). Each chunk waits for its turn."""

    def __init__(self, pace: float):
        self.pace = pace
        self.lock = threading.Lock()
        self.free_at = 0.0

    def take(self, seconds: float) -> None:
        with self.lock:
            now = time.monotonic()
            self.free_at = max(self.free_at, now) + seconds / self.pace
            until = self.free_at
        delay = until - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def read_ahead(requests, name: str) -> "queue.Queue":
    """A stream's requests read by a thread of their own into a queue, None after the last (or when
    the client went away): the handler sees whether more audio is already waiting."""
    inbox: "queue.Queue" = queue.Queue()

    def read() -> None:
        try:
            for r in requests:
                inbox.put(r)
        except Exception:  # the client went away or cancelled; the main loop sees the end
            pass
        inbox.put(None)

    threading.Thread(target=read, name=name, daemon=True).start()
    return inbox


def _check_app_id(settings: Settings, app_id: str, context) -> None:
    if settings.allowed_app_ids is not None and app_id not in settings.allowed_app_ids:
        context.abort(grpc.StatusCode.PERMISSION_DENIED, f"unknown app id '{app_id}'")


def _login(settings: Settings, device_id: str, claims: Dict[str, str]):
    claims = dict(claims, deviceId=device_id, scope="slu")
    issued = tokens.issue(settings.secret, claims, settings.token_validity_s)
    return issued["token"], issued["exp"]


class Identity(identity_pb2_grpc.IdentityAPIServicer):
    """speechly.identity.v2.IdentityAPI/Login: an HS256 JWT for an application or a project."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def Login(self, request, context):
        if not request.device_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "device_id is required")
        scope = request.WhichOneof("scope")
        if scope == "application":
            if not request.application.app_id:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "application.app_id is required")
            _check_app_id(self.settings, request.application.app_id, context)
            claims = {"appId": request.application.app_id}
            if request.application.config_id:
                claims["configId"] = request.application.config_id
        elif scope == "project":
            if not request.project.project_id:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "project.project_id is required")
            claims = {"projectId": request.project.project_id}
        else:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a scope (application or project) is required")
        token, exp = _login(self.settings, request.device_id, claims)
        expires = datetime.datetime.fromtimestamp(exp, datetime.timezone.utc)
        return identity_pb2.LoginResponse(token=token, valid_for_s=self.settings.token_validity_s,
                                          expires_at_epoch=exp, expires_at=expires.strftime("%Y-%m-%dT%H:%M:%SZ"))


class IdentityV1(identity_v1_pb2_grpc.IdentityServicer):
    """The legacy speechly.identity.v1.Identity/Login (app scope only, token only)."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def Login(self, request, context):
        if not request.device_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "device_id is required")
        if not request.app_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "app_id is required")
        _check_app_id(self.settings, request.app_id, context)
        token, _ = _login(self.settings, request.device_id, {"appId": request.app_id})
        return identity_v1_pb2.LoginResponse(token=token)


class Segment:
    """One stretch of speech inside a context: from the first loud frame to a long silence, or
    to a stable point where the recognizer ends it (Recognizer.cut)."""

    def __init__(self, start_sample: int, recognizer: Optional[Recognizer] = None):
        self.recognizer = recognizer       # None until the audio's band is known (Context.narrowband)
        self.id: Optional[int] = None      # the protocol's segment id, given when it first says something
        self.start_sample = start_sample   # in the context's 16 kHz audio
        self.silence = 0                   # samples of silence at the end
        self.pending = bytearray()         # audio not yet given to the recognizer
        self.heard: List[Word] = []        # the tentative words last sent, with their times
        self.intent: Optional[str] = None  # the tentative intent last sent
        self.entities: Tuple = ()          # the tentative entities last sent


class Context:
    """One audio context: start ... stop."""

    BAND_FRAMES = 10          # loud 10 ms frames that decide whether the audio is telephone band
    NARROWBAND_RATIO = 3e-5   # energy above 4.2 kHz under this share of the total: telephone band

    def __init__(self, rate: int):
        self.id = str(uuid.uuid4())
        self.samples = 0                   # 16 kHz samples received (after resampling)
        self.limit_samples = 0
        self.next_segment = 0
        self.segment: Optional[Segment] = None
        self.pre_roll = bytearray()
        self.odd = b""                     # half a sample left over from the last chunk
        self.resampler = Resampler(rate) if rate != RATE else None
        self.rate = rate
        self.overflow = False              # audio arrived beyond the context length limit
        self.prompt = ""                   # the final text so far, for the recognizer's context
        # Audio sent at 16 kHz may still be telephone band: a client that resampled 8 kHz audio
        # itself. Measured on the first loud frames (True/False once known).
        self.narrowband: Optional[bool] = True if rate < RATE else None
        self.band_frames = 0
        self.band_high = self.band_total = 0.0

    def measure_band(self, frame: bytes) -> None:
        try:
            import numpy as np
        except ImportError:
            self.narrowband = False
            return
        x = np.frombuffer(frame, dtype="<i2") * np.hanning(len(frame) // 2)
        power = np.abs(np.fft.rfft(x)) ** 2
        self.band_high += float(power[len(power) * 42 // 80:].sum())  # above 4.2 kHz
        self.band_total += float(power.sum())
        self.band_frames += 1
        if self.band_frames >= self.BAND_FRAMES:
            self.narrowband = self.band_high < self.NARROWBAND_RATIO * self.band_total


class SLU(slu_pb2_grpc.SLUServicer):
    """speechly.slu.v1.SLU/Stream."""

    def __init__(self, settings: Settings, engine: Engine, intents: Intents):
        self.settings, self.engine, self.intents = settings, engine, intents
        self.pacer = Pacer(settings.pace) if settings.pace > 0 else None

    # -- authentication

    def _authorize(self, context) -> dict:
        auth = ""
        for key, value in context.invocation_metadata():
            if key == "authorization":
                auth = value
        if not auth:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing 'authorization: Bearer <token>' metadata")
        if not auth.startswith("Bearer "):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "authorization metadata must be 'Bearer <token>'")
        try:
            claims = tokens.verify(self.settings.secret, auth[len("Bearer "):].strip())
        except tokens.TokenError as e:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
        if "slu" not in str(claims.get("scope", "")).split():
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "the token's scope does not include slu")
        return claims

    def _check_start_app_id(self, claims: dict, app_id: str, context) -> None:
        if "projectId" in claims:
            if not app_id:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              "start.app_id is required with a project-scoped token")
            _check_app_id(self.settings, app_id, context)
        elif app_id and app_id != claims.get("appId"):
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"start.app_id '{app_id}' is not the token's app id '{claims.get('appId')}'")

    def _check_config(self, config, context) -> None:
        if config.encoding != slu_pb2.SLUConfig.LINEAR16:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"config.encoding {config.encoding} is not LINEAR16")
        if config.channels != 1:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"config.channels must be 1, got {config.channels}")
        if not MIN_RATE <= config.sample_rate_hertz <= MAX_RATE:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"config.sample_rate_hertz must be {MIN_RATE}..{MAX_RATE}, got {config.sample_rate_hertz}")
        if config.sample_rate_hertz != RATE:
            if importlib.util.find_spec("numpy") is None:  # the resampler's only dependency
                context.abort(grpc.StatusCode.UNIMPLEMENTED,
                              f"config.sample_rate_hertz {config.sample_rate_hertz}: this server cannot resample "
                              "without numpy (pip install ./server); send 16000 Hz")
        lang = config.language_code
        if lang and not (lang.lower() == "en" or lang.lower().startswith("en-")):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"config.language_code '{lang}' is not supported: this server recognises English (en-US)")

    # -- the stream

    def Stream(self, request_iterator, context) -> Iterator[slu_pb2.SLUResponse]:
        claims = self._authorize(context)
        inbox = read_ahead(request_iterator, "slu-reader")
        rate = 0
        ctx: Optional[Context] = None
        ended_by_server = False   # the context hit the length limit: ignore its audio until stop
        rtt_id = 0
        rtt_sent: Dict[int, float] = {}
        next_rtt = time.monotonic() + self.settings.rtt_interval_s
        try:
            while True:
                now = time.monotonic()
                if now >= next_rtt:  # checked before reading, so a flood of audio cannot starve it
                    rtt_id += 1
                    rtt_sent[rtt_id] = now
                    if len(rtt_sent) > 16:  # clients need not answer: keep only the recent ones
                        del rtt_sent[min(rtt_sent)]
                    next_rtt = now + self.settings.rtt_interval_s
                    yield slu_pb2.SLUResponse(audio_context=ctx.id if ctx else "",
                                              rtt_request=slu_pb2.RoundTripMeasurementRequest(id=rtt_id))
                    continue
                try:
                    req = inbox.get(timeout=next_rtt - now)
                except queue.Empty:
                    continue
                if req is None:  # half-close: finish the open context, then end with OK
                    if ctx is not None:
                        yield from self._finish(ctx)
                        ctx = None
                    return
                kind = req.WhichOneof("streaming_request")
                if not rate:
                    if kind != "config":
                        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                      f"the first message must be config, got {kind or 'an empty request'}")
                    self._check_config(req.config, context)
                    rate = req.config.sample_rate_hertz
                    continue
                if kind == "event":
                    kind = "start" if req.event.event == slu_pb2.SLUEvent.START else "stop"
                    app_id = req.event.app_id
                else:
                    app_id = req.start.app_id if kind == "start" else ""
                if kind == "config":
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, "config may be sent only once, first")
                elif kind == "start":
                    if ctx is not None:
                        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                      "start while an audio context is open: send stop first")
                    self._check_start_app_id(claims, app_id, context)
                    ctx = Context(rate)
                    ctx.limit_samples = int(self.settings.context_limit_s * RATE)
                    ended_by_server = False
                    log.debug("context %s started", ctx.id)
                    yield slu_pb2.SLUResponse(audio_context=ctx.id, started=slu_pb2.SLUStarted())
                elif kind == "stop":
                    if ctx is None:
                        if ended_by_server:
                            ended_by_server = False
                            continue
                        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "stop without a started audio context")
                    yield from self._finish(ctx)
                    ctx = None
                elif kind == "audio":
                    if ctx is None:
                        if ended_by_server:
                            continue
                        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "audio before start")
                    if len(req.audio) > MAX_CHUNK:
                        context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                      f"an audio message must be under 1 MB, got {len(req.audio)} bytes")
                    yield from self._audio(ctx, req.audio, more=not inbox.empty())
                    if ctx.overflow:
                        log.info("context %s reached %.0f s: finished", ctx.id, self.settings.context_limit_s)
                        yield from self._finish(ctx, error=(
                            "context_too_long",
                            f"an audio context may last at most {self.settings.context_limit_s:g} s: "
                            "audio after that was dropped; stop and start a new context"))
                        ctx = None
                        ended_by_server = True
                elif kind == "rtt_response":
                    sent = rtt_sent.pop(req.rtt_response.id, None)
                    if sent is not None:
                        log.debug("rtt %d: %.1f ms", req.rtt_response.id, (time.monotonic() - sent) * 1000)
                else:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an empty request")
        finally:
            if ctx is not None and ctx.segment is not None and ctx.segment.recognizer is not None:
                ctx.segment.recognizer.close()

    # -- recognition

    def _resp(self, ctx: Context, segment_id: int = 0, **kw) -> slu_pb2.SLUResponse:
        return slu_pb2.SLUResponse(audio_context=ctx.id, segment_id=segment_id, **kw)

    def _audio(self, ctx: Context, pcm: bytes, flush: bool = False, more: bool = False):
        """One chunk of the client's audio: resampled, cut into segments on silence, recognised.
        more=True: more audio is already waiting, so a costly tentative decode may be skipped."""
        pcm = ctx.odd + pcm
        cut = len(pcm) - len(pcm) % 2
        pcm, ctx.odd = pcm[:cut], pcm[cut:]
        if ctx.resampler is not None:
            pcm = ctx.resampler.flush() if flush else ctx.resampler.process(pcm)
        room = max(0, (ctx.limit_samples - ctx.samples) * 2)
        if len(pcm) > room:
            pcm, ctx.overflow = pcm[:room], True
        if self.pacer is not None:
            self.pacer.take(len(pcm) / 2 / RATE)
        if not self.engine.recognizes:  # sink: one empty tentative per chunk, no VAD cost
            ctx.samples += len(pcm) // 2
            if not flush and not ctx.overflow:  # a chunk over the limit gets `finished` instead
                yield self._resp(ctx, tentative_transcript=slu_pb2.SLUTentativeTranscript())
            return
        s = self.settings
        silence_end = s.segment_silence_ms * RATE // 1000
        pre_roll = s.pre_roll_ms * RATE // 1000 * 2
        for off in range(0, len(pcm), FRAME * 2):
            frame = pcm[off:off + FRAME * 2]
            speech = rms(frame) > s.speech_rms
            if speech and ctx.narrowband is None and self.engine.uses_band and len(frame) == FRAME * 2:
                ctx.measure_band(frame)
            seg = ctx.segment
            if seg is None:
                if speech:
                    seg = ctx.segment = Segment(ctx.samples - len(ctx.pre_roll) // 2)
                    seg.pending += ctx.pre_roll
                    seg.pending += frame
                    ctx.pre_roll.clear()
                else:
                    ctx.pre_roll += frame
                    del ctx.pre_roll[:max(0, len(ctx.pre_roll) - pre_roll)]
            else:
                seg.pending += frame
                seg.silence = 0 if speech else seg.silence + len(frame) // 2
                if seg.silence >= silence_end:
                    yield from self._end_segment(ctx, seg)
            ctx.samples += len(frame) // 2
        if ctx.segment is not None:
            yield from self._feed(ctx, ctx.segment, more)

    def _words(self, seg: Segment, words: List[Word], cls=slu_pb2.SLUTranscript):
        offset = seg.start_sample * 1000 // RATE
        return [cls(word=w, index=i, start_time=offset + a, end_time=offset + b) for i, (w, a, b) in enumerate(words)]

    def _segment_id(self, ctx: Context, seg: Segment) -> int:
        if seg.id is None:  # ids count the segments the client sees: 0, 1, 2 ...
            seg.id = ctx.next_segment
            ctx.next_segment += 1
        return seg.id

    def _recognizer(self, ctx: Context, seg: Segment, ending: bool = False) -> Optional[Recognizer]:
        """The segment's recognizer; None while the audio's band is still being measured."""
        if seg.recognizer is None:
            if ctx.narrowband is None and self.engine.uses_band and not ending:
                return None
            seg.recognizer = self.engine.recognizer(ctx.rate, narrowband=bool(ctx.narrowband), prompt=ctx.prompt)
        return seg.recognizer

    def _feed(self, ctx: Context, seg: Segment, more: bool = False, ending: bool = False):
        """Gives the segment its pending audio. Yields its tentative results, or, when the
        recognizer ends it at a stable point, its final results, and continues with the next
        segment (ctx.segment) from there. Returns the segment that goes on."""
        recognizer = self._recognizer(ctx, seg, ending)
        if recognizer is None or not seg.pending:
            return seg
        words = recognizer.feed(bytes(seg.pending), more)
        seg.pending.clear()
        while True:
            cut = recognizer.cut()
            if cut is None:
                yield from self._tentative(ctx, seg, words)
                return seg
            yield from self._final(ctx, seg, cut.words, upto_ms=cut.samples * 1000 // RATE)
            self._remember(ctx, cut.text)
            nxt = Segment(seg.start_sample + cut.samples, cut.next)
            nxt.silence = seg.silence
            if ctx.segment is seg:
                ctx.segment = nxt
            seg, recognizer = nxt, cut.next
            # The audio after the cut may itself reach the bound (one huge chunk): feeding
            # nothing lets the recognizer decode and cut again.
            words = recognizer.feed(b"", more) or cut.tentative

    def _tentative(self, ctx: Context, seg: Segment, words: Optional[List[Word]]):
        # Empty words are not sent: a recognizer that lost its hypothesis has not heard silence,
        # and the words last sent are what the segment's final falls back on.
        if not words:
            return
        text = [w for w, _, _ in words]
        if text == [w for w, _, _ in seg.heard]:
            return
        seg.heard = words
        sid = self._segment_id(ctx, seg)
        yield self._resp(ctx, sid, tentative_transcript=slu_pb2.SLUTentativeTranscript(
            tentative_transcript=" ".join(text), tentative_words=self._words(seg, words)))
        match = self.intents.match(text, final=False)
        intent = match.intent if match else None
        entities = match.entities if match else ()
        if intent and intent != seg.intent:
            yield self._resp(ctx, sid, tentative_intent=slu_pb2.SLUIntent(intent=intent))
        seg.intent = intent
        if entities != seg.entities:
            yield self._resp(ctx, sid, tentative_entities=slu_pb2.SLUTentativeEntities(tentative_entities=[
                slu_pb2.SLUEntity(entity=t, value=v, start_position=a, end_position=b) for t, v, a, b in entities]))
        seg.entities = entities

    def _final(self, ctx: Context, seg: Segment, words: List[Word], upto_ms: Optional[int] = None):
        """Final words, entities and intent (computed on the final words), then segment_end.
        Every segment the client was told about ends here, with words if any were heard."""
        if not words and seg.heard:
            # The recognizer has nothing final (PocketSphinx's grammar when the audio stops
            # mid-sentence): the words the client was shown as tentative become final, since
            # segment_end drops tentative words. At a cut, only those before it.
            words = [w for w in seg.heard if upto_ms is None or w[2] <= upto_ms]
        if not words and seg.id is None:
            return  # a noise burst that recognised as nothing: no segment for the client
        sid = self._segment_id(ctx, seg)
        log.debug("context %s segment %d final: %s", ctx.id, sid, " ".join(w for w, _, _ in words))
        for t in self._words(seg, words):
            yield self._resp(ctx, sid, transcript=t)
        match = self.intents.match([w for w, _, _ in words], final=True) if words else None
        if match:
            for t, v, a, b in match.entities:
                yield self._resp(ctx, sid, entity=slu_pb2.SLUEntity(entity=t, value=v, start_position=a,
                                                                    end_position=b))
            yield self._resp(ctx, sid, intent=slu_pb2.SLUIntent(intent=match.intent))
        yield self._resp(ctx, sid, segment_end=slu_pb2.SLUSegmentEnd())

    @staticmethod
    def _remember(ctx: Context, text: str) -> None:
        if text:
            ctx.prompt = f"{ctx.prompt} {text}".strip()[-1000:]

    def _end_segment(self, ctx: Context, seg: Segment):
        """The segment's end (silence, stop, the context's limit): its rest is decoded once, final."""
        ctx.segment = None
        # more=True: no tentative decode of audio that finish() decodes anyway. The rest may
        # still reach the length bound and cut the segment first.
        seg = yield from self._feed(ctx, seg, more=True, ending=True)
        recognizer = self._recognizer(ctx, seg, ending=True)
        words = recognizer.finish()
        self._remember(ctx, recognizer.text)
        yield from self._final(ctx, seg, words)

    def _finish(self, ctx: Context, error=None):
        """Everything final for the context, then finished."""
        log.debug("context %s ends after %.2f s of audio", ctx.id, ctx.samples / RATE)
        if ctx.resampler is not None or ctx.odd:
            yield from self._audio(ctx, b"", flush=True)
        if ctx.segment is not None:
            yield from self._end_segment(ctx, ctx.segment)
        finished = slu_pb2.SLUFinished()
        if error:
            finished.error.code, finished.error.message = error
        yield self._resp(ctx, finished=finished)
