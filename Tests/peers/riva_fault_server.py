#!/usr/bin/env python3
"""A Riva service that fails every stream: it answers GetRivaSpeechRecognitionConfig as Riva does
(NVIDIA's generated stubs), then takes each StreamingRecognize call's audio for --fail-after
seconds without a result and ends the call UNAVAILABLE (a replica that dies on the same audio
every time, or a model that never answers). A client must run out of reconnect attempts.

With --end-early SECONDS instead, each call is a replica that ends its calls cleanly too soon:
it reads that much audio, sends one final result for it (one word per 100 ms block, "v" and the
block's first sample value, with its offsets), stops reading, and ends the call with status OK
0.3 s later, whatever audio is still coming (what the client must take as a loss, not the end).

Usage: riva_fault_server.py [--fail-after SECONDS | --end-early SECONDS]. Prints "listening on
127.0.0.1:PORT", then "stream N" as each call arrives; serves until stdin closes (a test that
dies takes it along)."""
import argparse
import sys
import threading
import time
from concurrent import futures

import grpc
from riva.client.proto import riva_asr_pb2 as rasr, riva_asr_pb2_grpc as rasr_grpc


class FailingASR(rasr_grpc.RivaSpeechRecognitionServicer):
    def __init__(self, fail_after: float, end_early: float = 0.0):
        self.fail_after = fail_after
        self.end_early = end_early
        self.streams = 0
        self.lock = threading.Lock()

    def GetRivaSpeechRecognitionConfig(self, request, context):
        response = rasr.RivaSpeechRecognitionConfigResponse()
        response.model_config.add(model_name="failing-en-US-asr-streaming",
                                  parameters={"language_code": "en-US", "type": "online", "streaming": "true"})
        return response

    def StreamingRecognize(self, request_iterator, context):
        with self.lock:
            self.streams += 1
            print(f"stream {self.streams}", flush=True)
        if self.end_early:
            yield from self.answer_then_end(request_iterator)
            return
        deadline = time.monotonic() + self.fail_after
        done = threading.Event()

        def drain():  # take the audio as it comes, as a live server does
            try:
                for _ in request_iterator:
                    if done.is_set():
                        return
            except grpc.RpcError:
                pass  # the call ended (aborted below)
        threading.Thread(target=drain, daemon=True).start()
        time.sleep(max(0.0, deadline - time.monotonic()))
        done.set()
        context.abort(grpc.StatusCode.UNAVAILABLE, "the recognizer died on this audio")
        yield  # a generator: the abort above ends the call before any response


    def answer_then_end(self, request_iterator):
        wanted = int(self.end_early * 16000) * 2
        audio = bytearray()
        for request in request_iterator:
            audio += request.audio_content
            if len(audio) >= wanted:
                break
        block = 3200  # 100 ms
        result = rasr.StreamingRecognitionResult(is_final=True)
        alternative = result.alternatives.add()
        words = []
        for k in range(min(len(audio), wanted) // block):
            value = int.from_bytes(audio[k * block:k * block + 2], "little", signed=True)
            words.append(f"v{value}")
            alternative.words.add(word=f"v{value}", start_time=k * 100, end_time=k * 100 + 100)
        alternative.transcript = " ".join(words)
        yield rasr.StreamingRecognizeResponse(results=[result])
        time.sleep(0.3)  # the client's audio keeps coming; it is never read


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-after", type=float, default=6.0)
    parser.add_argument("--end-early", type=float, default=0.0)
    args = parser.parse_args()
    # Ending early: a small flow-control window that grows only as the handler reads, so the
    # audio it leaves unread stays with the client (as behind a busy replica or a proxy).
    options = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 16384)] if args.end_early else []
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=options)
    rasr_grpc.add_RivaSpeechRecognitionServicer_to_server(FailingASR(args.fail_after, args.end_early), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    sys.stdin.read()
    server.stop(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
