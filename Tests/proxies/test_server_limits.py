"""A server that caps the calls it serves at once, as an operator caps a replica's load: grpcio's
maximum_concurrent_rpcs (the reference server's --max-concurrent-calls) answers the calls past
it with RESOURCE_EXHAUSTED, which no client retries. Every phrase must still arrive once, in order."""
import threading
import time

import proxytools as pt

LIMIT = 6              # calls the replica serves at once
BUDGET = 100_000       # bytes per stream: about 3 s of audio
DOWN_AT_S = 0.5        # wall seconds into the push
DOWN_AUDIO_S = 30.0    # audio pushed while the replica is down
PUSH_SPEED = 4.0


def test_a_long_outage_is_replayed_within_a_servers_limit_on_concurrent_calls(recording, tmp_path):
    """The replica is killed 0.5 s into a push at 4x and started again after 30 s more of audio:
    the outage's replay is about ten streams' worth. All at once, the calls past the limit were
    refused and the context failed with the outage's words."""
    wav, _ = recording
    replica = pt.Replicas(1, "--max-concurrent-calls", str(LIMIT))
    done = {}

    def act(t):
        if t >= DOWN_AT_S and "down" not in done:
            replica.kill(0)
            done["down"] = time.monotonic()
        elif "down" in done and "restart" not in done and t >= DOWN_AT_S + DOWN_AUDIO_S / PUSH_SPEED:
            def restart():  # beside the push, which goes on meanwhile
                replica.restart(0)
                done["up"] = time.monotonic()
            done["restart"] = threading.Thread(target=restart, daemon=True)
            done["restart"].start()

    try:
        run = pt.run_push(f"grpc://{replica.addresses[0]}", pt.read_pcm(wav), tmp_path / "cache", speed=PUSH_SPEED,
                          on_time=act, replay_buffer_ms=120_000, reconnect=(None, 200, 1000), stream_budget=BUDGET,
                          timeout=120)
        if "restart" in done:
            done["restart"].join(timeout=30)
    finally:
        replica.stop()
    assert "up" in done, "the push ended before the replica was started again"
    splits = [line for line in run.logs if "the replay goes out on " in line]
    pieces = [int(line.split("the replay goes out on ")[1].split()[0]) for line in splits]
    result = pt.count_delivered(run.transcripts)
    pt.report("server-call-limit", result, run.error_texts(), seconds=f"{run.elapsed:.1f}",
              outage_s=f"{done['up'] - done['down']:.1f}", replay_streams=max(pieces, default=0))
    assert result["delivered"] == len(pt.PHRASES) and not result["extra"], \
        pt.explain(result, run.error_texts(), "\n".join(run.logs[-30:]))
    assert pieces and max(pieces) > LIMIT, \
        f"no replay needed more streams than the server's limit: the outage did not test what it is for ({splits})"
