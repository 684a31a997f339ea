"""An NVIDIA Riva-compatible speech recognition service: `nvidia.riva.asr.RivaSpeechRecognition`
(StreamingRecognize, Recognize, GetRivaSpeechRecognitionConfig) on the messages of NVIDIA's own
generated stubs (the `nvidia-riva-client` package: `riva.client.proto`), with this server's
recognition engines and segmenting behind it. So a Riva client (NVIDIA's `riva.client`, or the
library's `riva://` backend) can be tested against a real gRPC server offline.

    python -m speechclient_server.riva --host 127.0.0.1 --port 0 --engine whisper
    python -m speechclient_server --protocol riva ...          (the same; --protocol all: both APIs)

The first stdout line is "listening on HOST:PORT", as with the Speechly server.

Mapping: one Riva utterance is one of the server's segments (a 600 ms pause, or the Whisper
engine's stable sentence end, or the --max-segment bound). Its tentative words are interim results
(is_final false, with a stability), its final words one final result (is_final true) with the word
offsets in ms from the start of the stream's audio and Whisper's word probabilities as confidences.
What Riva has and this server does not (FLAC/Opus, several alternatives, diarization, word boosting,
profanity filter, inverse text normalisation) is listed in server/README.md."""
from __future__ import annotations

if __name__ == "__main__":  # python -m speechclient_server.riva: the server with --protocol riva (which
    import sys              # says so when NVIDIA's stubs are missing)
    from .__main__ import main
    sys.exit(main(["--protocol", "riva", *sys.argv[1:]]))

import array
import dataclasses
import logging
import struct
from typing import Iterator, List, Optional, Tuple

import grpc

try:  # NVIDIA's generated stubs, from the nvidia-riva-client wheel
    from riva.client.proto import riva_asr_pb2 as rasr, riva_asr_pb2_grpc as rasr_grpc, riva_audio_pb2 as raudio
except ImportError as e:  # pragma: no cover - said by the CLI
    raise ImportError("the Riva service needs NVIDIA's stubs from the nvidia-riva-client package: "
                      "pip install './server[riva]'") from e

from .audio import RATE
from .engines import Engine, Word
from .server import SLU, Context, Segment, Settings, read_ahead

log = logging.getLogger("speechclient_server.riva")

LANGUAGE = "en-US"
MIN_RATE, MAX_RATE = 1000, 192000   # Riva resamples any rate (below 8 kHz "no meaningful output")
MAX_CHANNELS = 8
MAX_HEADER = 1 << 16                # bytes of a WAV header looked at before its data chunk
NO_LIMIT = 10 ** 12                 # samples: a Riva stream has no length limit
ENCODING_NAMES = {v: k for k, v in raudio.AudioEncoding.items()}
# WAV format tags: PCM, A-law, mu-law (WAVE_FORMAT_EXTENSIBLE names one of them in its sub-format)
WAV_FORMATS = {1: raudio.LINEAR_PCM, 6: raudio.ALAW, 7: raudio.MULAW}


class ConfigError(Exception):
    """A request the server refuses: INVALID_ARGUMENT with this message (Riva's style: 'Error: ...')."""


def model_names(engine: Engine) -> Tuple[str, str]:
    """(streaming, offline) model names, in Riva's naming style."""
    return f"{engine.name}-{LANGUAGE}-asr-streaming", f"{engine.name}-{LANGUAGE}-asr-offline"


# -- audio in: WAV header, G.711, channels

def _g711_tables() -> Tuple[List[int], List[int]]:
    mulaw, alaw = [], []
    for byte in range(256):
        u = ~byte & 0xFF
        magnitude = ((((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 7)) - 0x84
        mulaw.append(-magnitude if u & 0x80 else magnitude)
        a = byte ^ 0x55
        exponent, mantissa = (a >> 4) & 7, a & 0x0F
        magnitude = (mantissa << 4) + 8 if exponent == 0 else ((mantissa << 4) + 0x108) << (exponent - 1)
        alaw.append(magnitude if a & 0x80 else -magnitude)
    return mulaw, alaw


_MULAW, _ALAW = _g711_tables()


@dataclasses.dataclass
class Format:
    encoding: int      # raudio.AudioEncoding (ENCODING_UNSPECIFIED: LINEAR_PCM unless a WAV header says)
    rate: int          # 0: not given (a WAV header must say)
    channels: int      # 0: not given (1 unless a WAV header says)

    def describe(self) -> str:
        return (f"{ENCODING_NAMES.get(self.encoding, self.encoding)}, {self.rate or '?'} Hz, "
                f"{self.channels or '?'} channel(s)")


def parse_wav_header(data: bytes) -> Optional[Tuple[Format, int]]:
    """(format, offset of the samples) of a RIFF/WAVE header at the start of `data`; None while
    `data` holds too little of it. Raises ConfigError for a broken header or another sample format."""
    if len(data) < 12:
        return None
    if data[8:12] != b"WAVE":
        raise ConfigError("Error: audio starts with RIFF but is not a WAVE file")
    pos, fmt = 12, None
    while True:
        if pos + 8 > len(data):
            return None
        chunk, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if chunk == b"data":
            if fmt is None:
                raise ConfigError("Error: WAV header without a fmt chunk before its data")
            return fmt, pos + 8
        if pos + 8 + size > len(data):
            return None
        if chunk == b"fmt ":
            if size < 16:
                raise ConfigError("Error: WAV fmt chunk too short")
            tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", data[pos + 8:pos + 24])
            if tag == 0xFFFE and size >= 26:
                tag = struct.unpack("<H", data[pos + 32:pos + 34])[0]
            encoding = WAV_FORMATS.get(tag)
            if encoding is None or (encoding == raudio.LINEAR_PCM and bits != 16) or \
                    (encoding != raudio.LINEAR_PCM and bits != 8):
                raise ConfigError(f"Error: unsupported WAV sample format (format tag {tag}, {bits} bits): this "
                                  "server takes 16-bit linear PCM, 8-bit mu-law or A-law")
            fmt = Format(encoding, rate, channels)
        pos += 8 + size + (size & 1)
        if pos > MAX_HEADER:
            raise ConfigError("Error: no data chunk in the first 64 kB of the WAV file")


class AudioIn:
    """A stream's audio as the client sends it (LINEAR_PCM, MULAW or ALAW, any rate, N channels,
    optionally behind a WAV header as NVIDIA's file examples send it) -> 16-bit mono PCM of the
    first channel at `fmt.rate`. The format is final once the first audio bytes are seen."""

    def __init__(self, fmt: Format):
        self.fmt = fmt
        self.head = bytearray()     # the first bytes, until it is known whether a header leads
        self.ready = False
        self.rest = b""             # an incomplete frame left from the last chunk
        self.header: Optional[Format] = None

    def _resolve(self, final: bool = False) -> bool:
        """Whether a WAV header leads, and the format: False while too few bytes have come."""
        data = bytes(self.head)
        if data[:4] == b"RIFF":
            parsed = parse_wav_header(data)
            if parsed is None:
                if final:
                    raise ConfigError("Error: the audio ended inside its WAV header")
                if len(data) > MAX_HEADER:
                    raise ConfigError("Error: no data chunk in the first 64 kB of the WAV file")
                return False
            header, offset = parsed
            self.header = header
            mine = self.fmt
            if (mine.encoding not in (raudio.ENCODING_UNSPECIFIED, header.encoding)
                    or (mine.rate and mine.rate != header.rate) or (mine.channels and mine.channels != header.channels)):
                raise ConfigError(f"Error: config format doesn't match with header format (config: {mine.describe()}; "
                                  f"WAV header: {header.describe()})")
            self.fmt = Format(header.encoding, header.rate, header.channels)
            data = data[offset:]
        elif len(data) < 4 and not final:
            return False
        if self.fmt.encoding == raudio.ENCODING_UNSPECIFIED:
            self.fmt.encoding = raudio.LINEAR_PCM
        self.fmt.channels = self.fmt.channels or 1
        if not self.fmt.rate:
            raise ConfigError("Error: sample_rate_hertz is required (no WAV header gives it)")
        check_rate(self.fmt.rate)
        check_channels(self.fmt.channels)
        self.head = bytearray(data)
        self.ready = True
        return True

    def feed(self, data: bytes) -> bytes:
        if not self.ready:
            self.head += data
            if not self._resolve():
                return b""
            data, self.head = bytes(self.head), bytearray()
        return self._convert(data)

    def flush(self) -> bytes:
        """The end of the audio: what is still held (audio shorter than 4 bytes; a cut-off header is an error)."""
        if self.ready or not self.head:
            return b""
        self._resolve(final=True)
        data, self.head = bytes(self.head), bytearray()
        return self._convert(data)

    def _convert(self, data: bytes) -> bytes:
        width = 2 if self.fmt.encoding == raudio.LINEAR_PCM else 1
        frame = width * self.fmt.channels
        data = self.rest + data
        cut = len(data) - len(data) % frame
        data, self.rest = data[:cut], data[cut:]
        if self.fmt.channels > 1:  # Riva: without separate recognition, only the first channel
            data = data[::self.fmt.channels] if width == 1 else array.array("h", data)[::self.fmt.channels].tobytes()
        if width == 1:
            table = _MULAW if self.fmt.encoding == raudio.MULAW else _ALAW
            return struct.pack(f"<{len(data)}h", *(table[b] for b in data))
        return data


def check_rate(rate: int) -> None:
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ConfigError(f"Error: sample_rate_hertz {rate} is not supported: this server resamples "
                          f"{MIN_RATE}..{MAX_RATE} Hz to its model's {RATE} Hz")


def check_channels(channels: int) -> None:
    if not 1 <= channels <= MAX_CHANNELS:
        raise ConfigError(f"Error: audio_channel_count {channels} is not supported (1..{MAX_CHANNELS}; "
                          "only the first channel is recognised)")


# -- the recognition config

@dataclasses.dataclass
class Options:
    fmt: Format
    interim: bool
    punctuation: bool
    word_offsets: bool
    segment_silence_ms: Optional[int]   # EndpointingConfig.stop_history, if given


def check_config(config: "rasr.RecognitionConfig", engine: Engine, kind: str) -> Options:
    """Validates a RecognitionConfig as Riva does (INVALID_ARGUMENT, 'Error: ...'). kind: 'online'
    (StreamingRecognize) or 'offline' (Recognize)."""
    lang = config.language_code
    streaming, offline = model_names(engine)
    if (lang and not (lang.lower() == "en" or lang.lower().startswith("en-"))) or \
            (config.model and config.model not in (streaming, offline)):
        params = f"language_code={lang}; " + (f"model={config.model}; " if config.model else "") + f"type={kind};"
        raise ConfigError(f"Error: Unavailable model requested given these parameters: {params} "
                          f"(this server has {streaming} and {offline}, language {LANGUAGE})")
    if config.encoding not in (raudio.ENCODING_UNSPECIFIED, raudio.LINEAR_PCM, raudio.MULAW, raudio.ALAW):
        name = ENCODING_NAMES.get(config.encoding, str(config.encoding))
        raise ConfigError(f"Error: encoding {name} is not supported by this server: send LINEAR_PCM "
                          "(16-bit signed little-endian), MULAW or ALAW")
    if config.sample_rate_hertz:
        check_rate(config.sample_rate_hertz)
    if config.audio_channel_count:
        check_channels(config.audio_channel_count)
    if config.max_alternatives < 0:
        raise ConfigError(f"Error: max_alternatives {config.max_alternatives} must not be negative")
    silence = None
    if config.HasField("endpointing_config") and config.endpointing_config.HasField("stop_history"):
        silence = config.endpointing_config.stop_history
        if not 100 <= silence <= 10000:
            raise ConfigError(f"Error: endpointing_config.stop_history {silence} ms is not supported (100..10000)")
    return Options(Format(config.encoding, config.sample_rate_hertz, config.audio_channel_count),
                   interim=False, punctuation=config.enable_automatic_punctuation,
                   word_offsets=config.enable_word_time_offsets, segment_silence_ms=silence)


# -- utterances: the Speechly server's segmenting, with Riva results

def _agreed(a: List[str], b: List[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class Utterances(SLU):
    """server.SLU's audio path (silence detection, resampling, the engines' segments, cuts at stable
    points, the fallback to the last tentative words) yielding Riva StreamingRecognitionResults
    instead of Speechly messages. One per stream."""

    STABILITY_MIN, STABILITY_MAX = 0.1, 0.9

    def __init__(self, settings: Settings, engine: Engine, options: Options):
        super().__init__(settings, engine, intents=None)
        self.options = options

    def context(self, rate: int) -> Context:
        ctx = Context(rate)
        ctx.limit_samples = NO_LIMIT
        return ctx

    def _resp(self, ctx, segment_id=0, **kw):
        return None  # the sink engine's empty tentative transcripts: nothing in Riva

    def _tentative(self, ctx: Context, seg: Segment, words: Optional[List[Word]]):
        if not words:
            return
        text = [w for w, _, _ in words]
        before = [w for w, _, _ in seg.heard]
        if text == before:
            return
        seg.heard = words
        if not self.options.interim:
            return
        # Stability: the share of this hypothesis the last one already had, from its start (the
        # Whisper engine's local agreement finalises exactly such words), within 0.1..0.9.
        stability = min(self.STABILITY_MAX, max(self.STABILITY_MIN, _agreed(before, text) / len(text)))
        yield rasr.StreamingRecognitionResult(
            alternatives=[rasr.SpeechRecognitionAlternative(transcript=" ".join(text))],
            is_final=False, stability=round(stability, 2), channel_tag=1, audio_processed=ctx.samples / RATE)

    def _final(self, ctx: Context, seg: Segment, words: List[Word], upto_ms: Optional[int] = None):
        recognizer = seg.recognizer
        confidence = recognizer.confidence if recognizer is not None else None
        text = recognizer.text.strip() if recognizer is not None else ""
        if not words and seg.heard:  # no final hypothesis: the words last shown become final
            words = [w for w in seg.heard if upto_ms is None or w[2] <= upto_ms]
            confidence, text = None, ""
        if not words:
            return  # silence or noise that recognised as nothing: no result
        if confidence is not None and len(confidence) != len(words):
            confidence = None
        plain = " ".join(w for w, _, _ in words)
        transcript = text if self.options.punctuation and text else plain
        alternative = rasr.SpeechRecognitionAlternative(
            # A trailing space, as Riva's finals have: concatenated results read right.
            transcript=transcript + " ",
            confidence=sum(confidence) / len(confidence) if confidence else 0.0)
        if self.options.word_offsets:
            offset = seg.start_sample * 1000 // RATE
            alternative.words.extend(
                rasr.WordInfo(word=w, start_time=offset + a, end_time=offset + b,
                              confidence=confidence[i] if confidence else 0.0)
                for i, (w, a, b) in enumerate(words))
        yield rasr.StreamingRecognitionResult(alternatives=[alternative], is_final=True, channel_tag=1,
                                              audio_processed=ctx.samples / RATE)

    def _finish(self, ctx: Context, error=None):
        """The end of the audio: everything final (Riva sends no message of its own for it)."""
        if ctx.resampler is not None or ctx.odd:
            yield from self._audio(ctx, b"", flush=True)
        if ctx.segment is not None:
            yield from self._end_segment(ctx, ctx.segment)

    def close(self, ctx: Optional[Context]) -> None:
        if ctx is not None and ctx.segment is not None and ctx.segment.recognizer is not None:
            ctx.segment.recognizer.close()


# -- the service

class RivaASR(rasr_grpc.RivaSpeechRecognitionServicer):
    """nvidia.riva.asr.RivaSpeechRecognition over this server's engines."""

    def __init__(self, settings: Settings, engine: Engine, api_key: Optional[str] = None, word_offsets: bool = True):
        self.settings, self.engine, self.api_key = settings, engine, api_key
        self.word_offsets = word_offsets  # False: none given, whatever is asked (--riva-no-word-offsets)

    def _authorize(self, context) -> None:
        """With --api-key: `authorization: Bearer KEY` metadata, as NVIDIA's hosted endpoints take it."""
        if self.api_key is None:
            return
        auth = dict(context.invocation_metadata()).get("authorization", "")
        if not auth:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing 'authorization: Bearer <api key>' metadata")
        if auth != f"Bearer {self.api_key}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid api key in 'authorization' metadata")

    def _utterances(self, options: Options) -> Utterances:
        settings = self.settings
        if options.segment_silence_ms:
            settings = dataclasses.replace(settings, segment_silence_ms=options.segment_silence_ms)
        return Utterances(settings, self.engine, options)

    def GetRivaSpeechRecognitionConfig(self, request, context):
        self._authorize(context)
        streaming, offline = model_names(self.engine)
        response = rasr.RivaSpeechRecognitionConfigResponse()
        for name, kind in ((streaming, "online"), (offline, "offline")):
            if request.model_name and request.model_name != name:
                continue
            parameters = {"language_code": LANGUAGE, "type": kind, "streaming": str(kind == "online").lower(),
                          "sample_rate": str(RATE), "engine": self.engine.name, "encodings": "LINEAR_PCM,MULAW,ALAW"}
            if getattr(self.engine, "max_bytes", None):
                parameters["max_segment_s"] = f"{self.engine.max_bytes / 32000:g}"
            response.model_config.add(model_name=name, parameters=parameters)
        return response

    def StreamingRecognize(self, request_iterator, context) -> Iterator["rasr.StreamingRecognizeResponse"]:
        self._authorize(context)
        requests = iter(request_iterator)
        try:
            first = next(requests)
        except StopIteration:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "Error: the stream ended before its first request: send streaming_config first")
        kind = first.WhichOneof("streaming_request")
        if kind != "streaming_config":
            got = "audio_content" if kind else "an empty request"
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"Error: the first StreamingRecognizeRequest must carry streaming_config, got {got}")
        try:
            options = check_config(first.streaming_config.config, self.engine, "online")
            options.word_offsets = options.word_offsets and self.word_offsets
        except ConfigError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        options.interim = first.streaming_config.interim_results
        request_id = first.id if first.HasField("id") else None

        def response(result) -> "rasr.StreamingRecognizeResponse":
            r = rasr.StreamingRecognizeResponse(results=[result])
            if request_id is not None:
                r.id.CopyFrom(request_id)
            return r

        inbox = read_ahead(requests, "riva-reader")
        utterances = self._utterances(options)
        audio_in = AudioIn(options.fmt)
        ctx: Optional[Context] = None
        log.info("riva stream: %s, interim %s", options.fmt.describe(), options.interim)
        try:
            while True:
                req = inbox.get()
                if req is None:
                    break
                kind = req.WhichOneof("streaming_request")
                if kind == "streaming_config":
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  "Error: streaming_config may be sent only once, in the first request")
                if not req.audio_content:
                    continue  # an empty chunk (or an empty request): nothing to do
                try:
                    pcm = audio_in.feed(req.audio_content)
                except ConfigError as e:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
                if not audio_in.ready:
                    continue
                if ctx is None:
                    ctx = utterances.context(audio_in.fmt.rate)
                for result in utterances._audio(ctx, pcm, more=not inbox.empty()):
                    if result is not None:
                        yield response(result)
            # half-close: the open utterance becomes final, then the call ends OK
            try:
                tail = audio_in.flush()
            except ConfigError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            if audio_in.ready and ctx is None:
                ctx = utterances.context(audio_in.fmt.rate)
            if ctx is not None:
                for result in utterances._audio(ctx, tail, more=True):
                    if result is not None:
                        yield response(result)
                for result in utterances._finish(ctx):
                    if result is not None:
                        yield response(result)
                ctx = None
        finally:
            utterances.close(ctx)

    def Recognize(self, request, context):
        self._authorize(context)
        try:
            options = check_config(request.config, self.engine, "offline")
            options.word_offsets = options.word_offsets and self.word_offsets
            audio_in = AudioIn(options.fmt)
            pcm = audio_in.feed(request.audio) + audio_in.flush()
        except ConfigError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        response = rasr.RecognizeResponse()
        if request.HasField("id"):
            response.id.CopyFrom(request.id)
        if not audio_in.ready:
            return response
        utterances = self._utterances(options)
        ctx = utterances.context(audio_in.fmt.rate)
        step = audio_in.fmt.rate * 2  # a second of audio at a time; more=True: no tentative decodes
        try:
            results = []
            for i in range(0, len(pcm), step):
                results.extend(utterances._audio(ctx, pcm[i:i + step], more=True))
            results.extend(utterances._finish(ctx))
            ctx = None
        finally:
            utterances.close(ctx)
        for r in results:
            if r is not None and r.is_final:
                response.results.add(alternatives=r.alternatives, channel_tag=r.channel_tag,
                                     audio_processed=r.audio_processed)
        return response


def add_to_server(server, settings: Settings, engine: Engine, api_key: Optional[str] = None,
                  word_offsets: bool = True) -> RivaASR:
    servicer = RivaASR(settings, engine, api_key, word_offsets)
    rasr_grpc.add_RivaSpeechRecognitionServicer_to_server(servicer, server)
    return servicer

