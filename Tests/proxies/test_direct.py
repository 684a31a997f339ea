"""What the proxy scenarios' count means: straight to each replica, no proxy, the recordings give
24 of 24 phrases, once each, in order, and no other word."""
import pytest

import proxytools as pt


@pytest.mark.parametrize("which", ["recording", "recording_with_gap"])
def test_each_replica_alone_delivers_every_phrase(live_replicas, which, request, tmp_path):
    wav, _ = request.getfixturevalue(which)
    # The gap recording differs only by its long pause: one replica is enough (keeps the suite short).
    addresses = live_replicas.addresses if which == "recording" else live_replicas.addresses[:1]
    for i, address in enumerate(addresses):
        run = pt.run_demo(f"grpc://{address}", wav, tmp_path / "cache", timeout=120)
        result = pt.count_delivered(run.transcripts)
        pt.report(f"direct-{which.replace('_', '-')}-replica{i + 1}", result, run.error_texts(),
                  seconds=f"{run.elapsed:.1f}")
        assert result["delivered"] == len(pt.PHRASES) and not result["extra"], \
            pt.explain(result, run.error_texts(), run.stderr)
