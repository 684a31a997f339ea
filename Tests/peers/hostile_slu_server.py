#!/usr/bin/env python3
"""A hostile Speechly SLU server (grpcio, the reference server's stubs and login) for the memory
bounds of issue 23: after `started` it sends, for segment 0, what the scenario says, as fast as
the client takes it, and never ends the segment.

Usage: hostile_slu_server.py --scenario NAME  (prints "listening on 127.0.0.1:PORT" first)

  HugeWords     messages each carrying one new final word of 3 MB (every message under the
                4 MiB cap, the segment under its word-count bound): 50 of them, 150 MB.
  ManySmallWords  16,383 one-byte final words, one message each, then 200 tentative
                transcripts of the same 16,383 words: counts under every count bound.
  ManySegments  tentative transcripts of 60 words of 1,000 bytes for segments 0, 1, 2, ...
                (never ended): 60 KB each, 400 of them.
  NoStarted     accepts the stream and never answers, not even `started` (issue 19 item 1).
  NulWord       a final segment whose words hold NUL bytes ("kit\\0chen"), then finished.
  OtherContext  after `started` for its context, a final word for another audio_context.
  UnknownKinds  responses of a kind no client knows (a payload in field 99), naming no
                audio_context, before `started` and after it; then a final segment "hello
                there" and, at the client's stop, finished (what a newer server's notice looks
                like to an older client).
  Grow          --words N final words for segment 0, one small message each (the segment grows
                by one word per update: what `make bench` times per update), then at the
                client's stop segment_end and finished.
"""
import argparse
import sys
import time
from concurrent import futures

import grpc

from speechclient_server.server import Identity, Settings
from speechclient_server._proto.speechly.identity.v2 import identity_pb2_grpc
from speechclient_server._proto.speechly.slu.v1 import slu_pb2, slu_pb2_grpc

ARGS = None


def word(text, index):
    return slu_pb2.SLUTranscript(word=text, index=index, start_time=index * 10, end_time=index * 10 + 5)


class HostileSLU(slu_pb2_grpc.SLUServicer):
    def Stream(self, request_iterator, context):
        context_id = "hostile-1"
        if ARGS.scenario == "NoStarted":
            while context.is_active():
                time.sleep(0.1)
            return
        for request in request_iterator:
            kind = request.WhichOneof("streaming_request")
            if kind == "start" or (kind == "event" and request.event.event == slu_pb2.SLUEvent.START):
                break
        # Field 99, length-delimited ("notice"): kept by protobuf as an unknown field and sent.
        unknown = slu_pb2.SLUResponse.FromString(b"\x9a\x06\x06notice")
        if ARGS.scenario == "UnknownKinds":
            yield unknown
        yield slu_pb2.SLUResponse(audio_context=context_id, started=slu_pb2.SLUStarted())
        s = ARGS.scenario
        if s == "HugeWords":
            big = "w" * (3 << 20)
            for i in range(50):
                yield slu_pb2.SLUResponse(audio_context=context_id, segment_id=0, transcript=word(big, i))
        elif s == "ManySmallWords":
            for i in range(16383):
                yield slu_pb2.SLUResponse(audio_context=context_id, segment_id=0, transcript=word("a", i))
            words = [word("b", i) for i in range(16383)]
            for _ in range(200):
                yield slu_pb2.SLUResponse(audio_context=context_id, segment_id=0,
                                          tentative_transcript=slu_pb2.SLUTentativeTranscript(
                                              tentative_transcript="b", tentative_words=words))
        elif s == "NulWord":
            for i, text in enumerate(["turn", "on", "the", "kit\0chen", "lights\0"]):
                yield slu_pb2.SLUResponse(audio_context=context_id, segment_id=0, transcript=word(text, i))
            yield slu_pb2.SLUResponse(audio_context=context_id, segment_id=0, segment_end=slu_pb2.SLUSegmentEnd())
            for request in request_iterator:  # until the client's stop
                if request.WhichOneof("streaming_request") == "stop" or (
                        request.WhichOneof("streaming_request") == "event" and request.event.event == slu_pb2.SLUEvent.STOP):
                    break
            yield slu_pb2.SLUResponse(audio_context=context_id, finished=slu_pb2.SLUFinished())
            return
        elif s == "UnknownKinds":
            yield unknown
            for i, text in enumerate(["hello", "there"]):
                yield slu_pb2.SLUResponse(audio_context=context_id, segment_id=0, transcript=word(text, i))
                yield unknown
            yield slu_pb2.SLUResponse(audio_context=context_id, segment_id=0, segment_end=slu_pb2.SLUSegmentEnd())
            for request in request_iterator:  # until the client's stop
                if request.WhichOneof("streaming_request") == "stop" or (
                        request.WhichOneof("streaming_request") == "event" and request.event.event == slu_pb2.SLUEvent.STOP):
                    break
            yield unknown
            yield slu_pb2.SLUResponse(audio_context=context_id, finished=slu_pb2.SLUFinished())
            return
        elif s == "Grow":
            for i in range(ARGS.words):
                yield slu_pb2.SLUResponse(audio_context=context_id, segment_id=0, transcript=word(f"w{i % 1000}", i))
            for request in request_iterator:  # until the client's stop
                if request.WhichOneof("streaming_request") == "stop" or (
                        request.WhichOneof("streaming_request") == "event" and request.event.event == slu_pb2.SLUEvent.STOP):
                    break
            yield slu_pb2.SLUResponse(audio_context=context_id, segment_id=0, segment_end=slu_pb2.SLUSegmentEnd())
            yield slu_pb2.SLUResponse(audio_context=context_id, finished=slu_pb2.SLUFinished())
            return
        elif s == "OtherContext":
            yield slu_pb2.SLUResponse(audio_context="someone-else", segment_id=0, transcript=word("hello", 0))
        elif s == "ManySegments":
            words = [word("c" * 1000, i) for i in range(60)]
            for seg in range(400):
                yield slu_pb2.SLUResponse(audio_context=context_id, segment_id=seg,
                                          tentative_transcript=slu_pb2.SLUTentativeTranscript(
                                              tentative_transcript="c", tentative_words=words))
        # Keep the stream open without ending anything: the client must end it.
        while context.is_active():
            time.sleep(0.1)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", required=True, choices=["HugeWords", "ManySmallWords", "ManySegments", "NoStarted",
                                                           "NulWord", "OtherContext", "UnknownKinds", "Grow"])
    p.add_argument("--words", type=int, default=1000, help="Grow: how many words")
    ARGS = p.parse_args()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         options=[("grpc.max_send_message_length", 4 << 20)])
    identity_pb2_grpc.add_IdentityAPIServicer_to_server(Identity(Settings(secret=b"hostile")), server)
    slu_pb2_grpc.add_SLUServicer_to_server(HostileSLU(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    try:
        sys.stdin.read()  # exits when the test closes our stdin (or at once with /dev/null)
        server.wait_for_termination()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
