"""Google's protobuf runtime as the reference for the library's own codec: prints, one hex line
each, the bytes that the generated stubs (server/speechclient_server/_proto) produce for a fixed
set of requests and responses. ProtobufInteropTests.swift compares them with the Swift codec."""
import sys

from speechclient_server._proto.speechly.identity.v2 import identity_pb2 as idp
from speechclient_server._proto.speechly.slu.v1 import slu_pb2 as slu


def out(name, msg):
    print(name, msg.SerializeToString(deterministic=True).hex())


opt = slu.SLUStart.Option
out("config", slu.SLURequest(config=slu.SLUConfig(channels=1, sample_rate_hertz=16000, language_code="en-US")))
out("start", slu.SLURequest(start=slu.SLUStart(app_id="app", options=[opt(key="vocabulary", value=["kitchen", "bedroom"]),
                                                                       opt(key="timezone", value=["Europe/Helsinki"])])))
out("audio", slu.SLURequest(audio=bytes([1, 0, 0xFF, 0xFF, 0x00, 0x80, 0xFF, 0x7F])))
out("stop", slu.SLURequest(stop=slu.SLUStop()))
out("rtt", slu.SLURequest(rtt_response=slu.RoundTripMeasurementResponse(id=42)))
out("login_app", idp.LoginRequest(device_id="0f0e0d0c-0b0a-4908-8706-050403020100",
                                  application=idp.ApplicationScope(app_id="app")))
out("login_project", idp.LoginRequest(device_id="d", project=idp.ProjectScope(project_id="proj")))

w = slu.SLUTranscript
out("r_started", slu.SLUResponse(audio_context="ctx", started=slu.SLUStarted()))
out("r_word", slu.SLUResponse(audio_context="ctx", segment_id=3, transcript=w(word="kitchen", index=3, start_time=510, end_time=930)))
out("r_negative", slu.SLUResponse(audio_context="ctx", segment_id=-1, transcript=w(word="x", index=-2, start_time=-3, end_time=0)))
out("r_tentative", slu.SLUResponse(audio_context="ctx", segment_id=1, tentative_transcript=slu.SLUTentativeTranscript(
    tentative_transcript="turn on", tentative_words=[w(word="turn", index=0, start_time=0, end_time=270),
                                                     w(word="on", index=1, start_time=270, end_time=400)])))
out("r_entity", slu.SLUResponse(audio_context="ctx", entity=slu.SLUEntity(entity="room", value="kitchen", start_position=3, end_position=4)))
out("r_tentative_entities", slu.SLUResponse(audio_context="ctx", tentative_entities=slu.SLUTentativeEntities(
    tentative_entities=[slu.SLUEntity(entity="room", value="living room", start_position=3, end_position=5)])))
out("r_intent", slu.SLUResponse(audio_context="ctx", intent=slu.SLUIntent(intent="turn_on")))
out("r_tentative_intent", slu.SLUResponse(audio_context="ctx", tentative_intent=slu.SLUIntent(intent="turn_off")))
out("r_segment_end", slu.SLUResponse(audio_context="ctx", segment_id=2, segment_end=slu.SLUSegmentEnd()))
out("r_finished", slu.SLUResponse(audio_context="ctx", finished=slu.SLUFinished(error=slu.SLUError(code="E1", message="too long"))))
out("r_rtt", slu.SLUResponse(rtt_request=slu.RoundTripMeasurementRequest(id=7)))
out("login_response", idp.LoginResponse(token="a.b.c", valid_for_s=3600, expires_at_epoch=1900000000, expires_at="2030-03-17T17:46:40Z"))
sys.stdout.flush()
