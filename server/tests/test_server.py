"""The reference server driven by grpcio's own client (an implementation independent of the
library): login, auth failures, config and protocol errors, recognition with intents."""
import json
import base64
import subprocess
import sys
import time
import wave

import grpc
import pytest

from speechclient_server._proto.speechly.identity.v2 import identity_pb2 as idp, identity_pb2_grpc
from speechclient_server._proto.speechly.slu.v1 import slu_pb2 as slu, slu_pb2_grpc


class Server:
    def __init__(self, *args):
        self.proc = subprocess.Popen([sys.executable, "-m", "speechclient_server", "--port", "0", *args],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line
        self.address = line.split()[-1]
        self.channel = grpc.insecure_channel(self.address)

    def login(self, app_id="app", device_id="dev"):
        stub = identity_pb2_grpc.IdentityAPIStub(self.channel)
        return stub.Login(idp.LoginRequest(device_id=device_id, application=idp.ApplicationScope(app_id=app_id)))

    def stream(self, requests, token=None):
        stub = slu_pb2_grpc.SLUStub(self.channel)
        md = [("authorization", f"Bearer {token}")] if token else []
        return list(stub.Stream(iter(requests), metadata=md))

    def stop(self):
        self.channel.close()
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


def config(rate=16000, channels=1):
    return slu.SLURequest(config=slu.SLUConfig(channels=channels, sample_rate_hertz=rate, language_code="en-US"))


def speech_pcm(text, tmp_path):
    wav, out = tmp_path / "s.wav", tmp_path / "s16.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(wav), text], check=True)
    subprocess.run(["sox", str(wav), "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer", str(out)], check=True)
    with wave.open(str(out)) as w:
        return w.readframes(w.getnframes())


def test_login_issues_a_jwt_with_the_claims(server):
    r = server.login(app_id="my-app", device_id="d-1")
    payload = r.token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["appId"] == "my-app" and claims["deviceId"] == "d-1" and claims["scope"] == "slu"
    assert abs(claims["exp"] - (time.time() + 3600)) < 5
    assert r.valid_for_s == 3600 and r.expires_at_epoch == claims["exp"] and r.expires_at.endswith("Z")


@pytest.mark.parametrize("request_, code", [
    (idp.LoginRequest(application=idp.ApplicationScope(app_id="a")), grpc.StatusCode.INVALID_ARGUMENT),
    (idp.LoginRequest(device_id="d"), grpc.StatusCode.INVALID_ARGUMENT),
])
def test_login_rejects_incomplete_requests(server, request_, code):
    with pytest.raises(grpc.RpcError) as e:
        identity_pb2_grpc.IdentityAPIStub(server.channel).Login(request_)
    assert e.value.code() == code


@pytest.mark.parametrize("token, text", [(None, "authorization"), ("x.y.z", "signature")])
def test_stream_needs_a_valid_token(server, token, text):
    with pytest.raises(grpc.RpcError) as e:
        server.stream([config()], token=token)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and text in e.value.details()


def test_expired_token_is_unauthenticated():
    s = Server("--token-validity", "1")
    try:
        token = s.login().token
        time.sleep(1.2)
        with pytest.raises(grpc.RpcError) as e:
            s.stream([config()], token=token)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and "expired" in e.value.details()
    finally:
        s.stop()


@pytest.mark.parametrize("requests, code, text", [
    ([config(rate=44100)], grpc.StatusCode.INVALID_ARGUMENT, "sample_rate_hertz"),
    ([config(channels=2)], grpc.StatusCode.INVALID_ARGUMENT, "channels"),
    ([slu.SLURequest(start=slu.SLUStart())], grpc.StatusCode.FAILED_PRECONDITION, "first message"),
    ([config(), slu.SLURequest(audio=b"\0\0")], grpc.StatusCode.FAILED_PRECONDITION, "audio before start"),
    ([config(), slu.SLURequest(start=slu.SLUStart()), slu.SLURequest(start=slu.SLUStart())],
     grpc.StatusCode.FAILED_PRECONDITION, "start while"),
    ([config(), slu.SLURequest(stop=slu.SLUStop())], grpc.StatusCode.FAILED_PRECONDITION, "stop without"),
])
def test_protocol_errors(server, requests, code, text):
    with pytest.raises(grpc.RpcError) as e:
        server.stream(requests, token=server.login().token)
    assert e.value.code() == code and text in e.value.details()


def test_recognition_with_intent_and_two_segments(server, tmp_path):
    pcm = speech_pcm("turn on the kitchen lights", tmp_path) + b"\0\0" * 16000 + speech_pcm("stop the music", tmp_path)
    reqs = [config(), slu.SLURequest(start=slu.SLUStart(app_id="app"))]
    reqs += [slu.SLURequest(audio=pcm[i:i + 3200]) for i in range(0, len(pcm), 3200)]
    reqs.append(slu.SLURequest(stop=slu.SLUStop()))
    responses = server.stream(reqs, token=server.login().token)
    kinds = [r.WhichOneof("streaming_response") for r in responses]
    assert kinds[0] == "started" and kinds[-1] == "finished"
    ctx = responses[0].audio_context
    assert all(r.audio_context == ctx for r in responses)
    words = {}
    for r in responses:
        if r.HasField("transcript"):
            words.setdefault(r.segment_id, []).append(r.transcript)
    assert [" ".join(w.word for w in words[k]) for k in sorted(words)] == ["turn on the kitchen lights", "stop the music"]
    first = words[0]
    assert [w.index for w in first] == list(range(5))
    assert all(a.end_time <= b.start_time for a, b in zip(first, first[1:]))
    assert words[1][0].start_time > first[-1].end_time + 900
    assert kinds.index("tentative_transcript") < kinds.index("transcript")
    intents = [(r.segment_id, r.intent.intent) for r in responses if r.HasField("intent")]
    entities = [(r.entity.entity, r.entity.value, r.entity.start_position, r.entity.end_position)
                for r in responses if r.HasField("entity")]
    assert intents == [(0, "turn_on"), (1, "stop_music")]
    assert entities == [("room", "kitchen", 3, 4)]
    assert [r.segment_id for r in responses if r.HasField("segment_end")] == [0, 1]


def test_sink_engine_answers_each_chunk():
    s = Server("--engine", "sink")
    try:
        reqs = [config(), slu.SLURequest(start=slu.SLUStart())]
        reqs += [slu.SLURequest(audio=b"\1\0" * 1600)] * 5 + [slu.SLURequest(stop=slu.SLUStop())]
        kinds = [r.WhichOneof("streaming_response") for r in s.stream(reqs, token=s.login().token)]
        assert kinds == ["started"] + ["tentative_transcript"] * 5 + ["finished"]
    finally:
        s.stop()


def test_rtt_requests_arrive():
    s = Server("--rtt-interval", "0.2")
    try:
        def slow():
            yield config()
            time.sleep(0.7)
        responses = list(slu_pb2_grpc.SLUStub(s.channel).Stream(
            slow(), metadata=[("authorization", f"Bearer {s.login().token}")]))
        assert [r.rtt_request.id for r in responses if r.HasField("rtt_request")][:2] == [1, 2]
    finally:
        s.stop()
