#!/usr/bin/env python3
"""A Riva service that fails every stream: it answers GetRivaSpeechRecognitionConfig as Riva does
(NVIDIA's generated stubs), then takes each StreamingRecognize call's audio for --fail-after
seconds without a result and ends the call UNAVAILABLE (a replica that dies on the same audio
every time, or a model that never answers). A client must run out of reconnect attempts.

Usage: riva_fault_server.py [--fail-after SECONDS]. Prints "listening on 127.0.0.1:PORT", then
"stream N" as each call arrives; serves until stdin closes (a test that dies takes it along)."""
import argparse
import sys
import threading
import time
from concurrent import futures

import grpc
from riva.client.proto import riva_asr_pb2 as rasr, riva_asr_pb2_grpc as rasr_grpc


class FailingASR(rasr_grpc.RivaSpeechRecognitionServicer):
    def __init__(self, fail_after: float):
        self.fail_after = fail_after
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-after", type=float, default=6.0)
    args = parser.parse_args()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    rasr_grpc.add_RivaSpeechRecognitionServicer_to_server(FailingASR(args.fail_after), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    sys.stdin.read()
    server.stop(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
