"""The binding against the real reference server."""
import time
import wave

import pytest

import speechclient as sc

pytest.importorskip("speechclient_server", reason="the reference server is not installed (pip install ./server)")

from speechtools import Server, synthesize  # noqa: E402  (Tests/e2e)


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


def test_wav_file_transcribed(server, tmp_path):
    wav = synthesize("turn on the kitchen lights", tmp_path / "a.wav")
    with sc.Client(server.url, app_id="py", audio=sc.WavFile(str(wav)), cache_dir=str(tmp_path)) as c:
        c.start()
        updates = list(c.updates(timeout=30))
    finals = [u for u in updates if isinstance(u, sc.Segment) and u.final]
    assert isinstance(updates[0], sc.StartEvent) and isinstance(updates[-1], sc.StopEvent)
    assert finals[-1].transcript == "turn on the kitchen lights"
    assert finals[-1].intent == sc.Intent("turn_on", True)
    assert finals[-1].entities == (sc.Entity("room", "kitchen", 3, 4, True),)


def test_pushed_pcm_at_real_time_pace_two_contexts_on_one_stream(server, tmp_path):
    texts = ["stop the music", "play some jazz music"]
    with sc.Client(server.url, app_id="py", audio=sc.PushAudio(16000, 1), cache_dir=str(tmp_path)) as c:
        results = []
        for i, text in enumerate(texts):
            wav = synthesize(text, tmp_path / f"p{i}.wav")
            with wave.open(str(wav)) as w:
                pcm = w.readframes(w.getnframes())
            c.start()
            chunk = 3200  # 100 ms
            t0 = time.monotonic()
            for k, off in enumerate(range(0, len(pcm), chunk)):
                c.push(pcm[off:off + chunk])
                time.sleep(max(0.0, t0 + (k + 1) * 0.1 - time.monotonic()))
            c.push_end()
            updates = list(c.updates(timeout=30))
            results.append([u.transcript for u in updates if isinstance(u, sc.Segment) and u.final])
            contexts = {u.context_id for u in updates if isinstance(u, (sc.StartEvent, sc.StopEvent))}
            assert len(contexts) == 1
        assert results == [[texts[0]], [texts[1]]]


def test_cli_transcribes(server, tmp_path):
    import subprocess
    import sys
    wav = synthesize("what time is it", tmp_path / "c.wav")
    out = subprocess.run([sys.executable, "-m", "speechclient", "transcribe", str(wav), "--url", server.url,
                          "--cache-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "what time is it" in out.stdout
