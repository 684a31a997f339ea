"""Config validation, protocol order, rtt requests, the context length limit, the sink engine."""
import queue
import threading
import time

import grpc
import pytest

from conftest import audio_chunks, config, kind, silence, start, stop
from speechclient_server._proto.speechly.slu.v1 import slu_pb2 as slu


@pytest.fixture(scope="module")
def sink(request):
    from conftest import Server
    s = Server("--engine", "sink")
    request.addfinalizer(s.stop)
    return s


@pytest.mark.parametrize("request_, text", [
    (config(rate=7999), "sample_rate_hertz"),
    (config(rate=48001), "sample_rate_hertz"),
    (config(rate=0), "sample_rate_hertz"),
    (config(channels=2), "channels"),
    (config(channels=0), "channels"),
    (slu.SLURequest(config=slu.SLUConfig(encoding=3, channels=1, sample_rate_hertz=16000)), "LINEAR16"),
    (config(language_code="fi-FI"), "language_code"),
])
def test_config_errors_name_the_problem(sink, request_, text):
    with pytest.raises(grpc.RpcError) as e:
        sink.stream([request_], token=sink.login().token)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and text in e.value.details()


@pytest.mark.parametrize("rate", [8000, 11025, 16000, 22050, 44100, 48000])
def test_rates_from_8_to_48_khz_are_accepted(sink, rate):
    reqs = [config(rate=rate), start(), slu.SLURequest(audio=silence(0.2, rate)), stop()]
    assert [kind(r) for r in sink.stream(reqs, token=sink.login().token)] \
        == ["started", "tentative_transcript", "finished"]


@pytest.mark.parametrize("requests, text", [
    ([start()], "first message must be config"),
    ([slu.SLURequest(audio=b"\0\0")], "first message must be config"),
    ([config(), slu.SLURequest(audio=b"\0\0")], "audio before start"),
    ([config(), start(), stop(), slu.SLURequest(audio=b"\0\0")], "audio before start"),
    ([config(), start(), start()], "start while an audio context is open"),
    ([config(), stop()], "stop without a started audio context"),
    ([config(), start(), stop(), stop()], "stop without a started audio context"),
    ([config(), config()], "config may be sent only once"),
])
def test_protocol_violations_are_failed_precondition(sink, requests, text):
    with pytest.raises(grpc.RpcError) as e:
        sink.stream(requests, token=sink.login().token)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and text in e.value.details()


def test_oversized_audio_message_is_rejected(sink):
    with pytest.raises(grpc.RpcError) as e:
        sink.stream([config(), start(), slu.SLURequest(audio=b"\0" * (1 << 20 | 2))], token=sink.login().token)
    assert e.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)


def test_sink_answers_each_chunk_and_contexts_get_fresh_uuids(sink):
    reqs = [config()]
    for _ in range(3):
        reqs += [start(), *audio_chunks(b"\1\0" * 8000), stop()]
    responses = sink.stream(reqs, token=sink.login().token)
    assert [kind(r) for r in responses] == (["started"] + ["tentative_transcript"] * 5 + ["finished"]) * 3
    assert all(not r.tentative_transcript.tentative_words for r in responses if kind(r) == "tentative_transcript")
    ids = [r.audio_context for r in responses if kind(r) == "started"]
    import uuid
    assert len(set(ids)) == 3 and all(uuid.UUID(i).version == 4 for i in ids)
    by_ctx = {}
    for r in responses:
        by_ctx.setdefault(r.audio_context, []).append(kind(r))
    assert all(k[0] == "started" and k[-1] == "finished" for k in by_ctx.values())


def test_deprecated_events_start_and_stop(sink):
    reqs = [config(), slu.SLURequest(event=slu.SLUEvent(event=slu.SLUEvent.START)),
            slu.SLURequest(audio=b"\0\0" * 1600), slu.SLURequest(event=slu.SLUEvent(event=slu.SLUEvent.STOP))]
    assert [kind(r) for r in sink.stream(reqs, token=sink.login().token)] \
        == ["started", "tentative_transcript", "finished"]


def test_half_close_finishes_the_open_context(sink):
    responses = sink.stream([config(), start(), slu.SLURequest(audio=b"\0\0" * 1600)], token=sink.login().token)
    assert [kind(r) for r in responses] == ["started", "tentative_transcript", "finished"]


def test_rtt_requests_arrive_and_responses_are_accepted(start_server):
    s = start_server("--engine", "sink", "--rtt-interval", "0.2")
    outbox: "queue.Queue" = queue.Queue()
    outbox.put(config())

    def requests():
        while True:
            r = outbox.get()
            if r is None:
                return
            yield r
    call = s.call(requests(), token=s.login().token)
    ids = []
    t0 = time.monotonic()
    for r in call:
        assert kind(r) == "rtt_request"
        ids.append(r.rtt_request.id)
        outbox.put(slu.SLURequest(rtt_response=slu.RoundTripMeasurementResponse(id=r.rtt_request.id)))
        if len(ids) == 3:
            outbox.put(None)
    assert ids == [1, 2, 3] and 0.5 < time.monotonic() - t0 < 3


def test_rtt_requests_are_not_starved_by_a_flood_of_audio(start_server):
    s = start_server("--engine", "sink", "--rtt-interval", "0.1")
    stop_at = time.monotonic() + 1.0

    def flood():
        yield config()
        yield start()
        while time.monotonic() < stop_at:
            yield slu.SLURequest(audio=b"\0\0" * 1600)
        yield stop()
    kinds = [kind(r) for r in s.stream(flood(), token=s.login().token)]
    assert kinds.count("rtt_request") >= 3


def test_context_limit_finishes_the_context_with_an_error(start_server):
    """Audio beyond the limit (5 min by default; 1 s here) ends the context: the server sends
    everything final, then `finished` with error context_too_long, and ignores the rest of that
    context's audio and its stop. The stream stays usable for the next context."""
    s = start_server("--engine", "sink", "--context-limit", "1")
    reqs = [config(), start(), *audio_chunks(silence(1.5)), stop(), start(), *audio_chunks(silence(0.5)), stop()]
    responses = s.stream(reqs, token=s.login().token)
    kinds = [kind(r) for r in responses]
    assert kinds == (["started"] + ["tentative_transcript"] * 10 + ["finished"]
                     + ["started"] + ["tentative_transcript"] * 5 + ["finished"])
    first, second = responses[11].finished, responses[-1].finished
    assert first.error.code == "context_too_long" and "1 s" in first.error.message
    assert not second.HasField("error")
    assert responses[0].audio_context != responses[12].audio_context


def test_exactly_the_limit_is_not_an_error(start_server):
    s = start_server("--engine", "sink", "--context-limit", "1")
    responses = s.stream([config(), start(), *audio_chunks(silence(1.0)), stop()], token=s.login().token)
    assert kind(responses[-1]) == "finished" and not responses[-1].finished.HasField("error")


def test_streams_run_concurrently(sink):
    token = sink.login().token
    results = []

    def one():
        results.append([kind(r) for r in sink.stream([config(), start(), *audio_chunks(silence(0.5)), stop()],
                                                      token=token)])
    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [["started"] + ["tentative_transcript"] * 5 + ["finished"]] * 8
