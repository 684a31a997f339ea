"""The binding against the real reference server (marked e2e: skipped only when the package
speechclient_server is not importable; see conftest.py)."""
import asyncio
import os
import pathlib
import re
import subprocess
import threading
import sys
import time
import wave

import pytest

import speechclient as sc

pytestmark = pytest.mark.e2e

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "build" / "speechclient-demo"


def without_states(updates):
    return [u for u in updates if not isinstance(u, sc.StateEvent)]


def test_wav_file_transcribed(server, synthesize, cache_dir):
    wav = synthesize("turn on the kitchen lights")
    with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir) as c:
        c.start()
        updates = without_states(c.updates(timeout=30))
        assert c.wait_idle(5) and c.state == sc.State.IDLE
    assert isinstance(updates[0], sc.StartEvent) and isinstance(updates[-1], sc.StopEvent)
    assert updates[0].context_id and updates[0].context_id == updates[-1].context_id
    segments = [u for u in updates if isinstance(u, sc.Segment)]
    assert all(s.context_id == updates[0].context_id for s in segments)
    final = [s for s in segments if s.final][-1]
    assert final.transcript == "turn on the kitchen lights"
    assert final.transcript == " ".join(w.text for w in final.words)
    assert [w.index for w in final.words] == list(range(len(final.words)))
    assert all(w.final and 0 <= w.start_ms <= w.end_ms for w in final.words)
    assert final.intent == sc.Intent("turn_on", True)
    assert final.entities == (sc.Entity("room", "kitchen", 3, 4, True),)
    assert final.json.startswith('{"type":"segment"') and '"final":true' in final.json


def test_aupdates_against_the_server(server, synthesize, cache_dir):
    wav = synthesize("stop the music")

    async def run():
        with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir) as c:
            c.start()
            return [u async for u in c.aupdates(timeout=30)]
    updates = without_states(asyncio.run(asyncio.wait_for(run(), 60)))
    assert isinstance(updates[0], sc.StartEvent) and isinstance(updates[-1], sc.StopEvent)
    assert [u.transcript for u in updates if isinstance(u, sc.Segment) and u.final] == ["stop the music"]


def test_pushed_pcm_at_real_time_pace_two_contexts_on_one_client(server, synthesize, cache_dir):
    texts = ["stop the music", "play some jazz music"]
    with sc.Client(url=server.url, app_id="py", audio=sc.PushAudio(16000, 1), cache_dir=cache_dir) as c:
        results = []
        for text in texts:
            with wave.open(str(synthesize(text))) as w:
                pcm = w.readframes(w.getnframes())
            c.start()
            chunk = 3200  # 100 ms
            t0 = time.monotonic()
            for k, off in enumerate(range(0, len(pcm), chunk)):
                c.push(memoryview(pcm)[off:off + chunk])
                time.sleep(max(0.0, t0 + (k + 1) * 0.1 - time.monotonic()))
            c.push_end()
            updates = without_states(c.updates(timeout=30))
            results.append([u.transcript for u in updates if isinstance(u, sc.Segment) and u.final])
            contexts = {u.context_id for u in updates if isinstance(u, (sc.StartEvent, sc.StopEvent))}
            assert len(contexts) == 1
        assert results == [[texts[0]], [texts[1]]]


def test_cli_json_is_the_c_demos(server, synthesize, cache_dir):
    if not DEMO.exists():
        pytest.skip("build/speechclient-demo is not built")
    wav = synthesize("what time is it")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "bindings" / "python"))
    args = ["--url", server.url, "--app-id", "py", "--file", str(wav), "--cache-dir", cache_dir, "--json"]
    py = subprocess.run([sys.executable, "-m", "speechclient", *args], capture_output=True, text=True, env=env,
                        timeout=60)
    c = subprocess.run([str(DEMO), *args], capture_output=True, text=True, timeout=60)
    assert py.returncode == 0 and c.returncode == 0, (py.stderr, c.stderr)

    def shape(out):  # context ids differ between runs; everything else must not
        return [re.sub(r'"context_id":"[^"]*"', '"context_id":"*"', line) for line in out.splitlines()]
    assert shape(py.stdout) == shape(c.stdout)
    assert '"transcript":"what time is it"' in py.stdout


def test_cli_text_output(server, synthesize, cache_dir):
    wav = synthesize("turn on the kitchen lights")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "bindings" / "python"))
    r = subprocess.run([sys.executable, "-m", "speechclient", "--url", server.url, "--file", str(wav),
                        "--cache-dir", cache_dir], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "turn on the kitchen lights  [intent: turn_on]  [room: kitchen]"


def test_stop_mid_sentence_delivers_the_words_heard(server, synthesize, cache_dir):
    # Push-to-talk released while the user is still speaking: the stop cuts the phrase. Every
    # word the application was shown as tentative must arrive final before the stop event.
    with wave.open(str(synthesize("turn off the kitchen lights"))) as w:
        pcm = w.readframes(w.getnframes())[:32000]  # the first second
    with sc.Client(url=server.url, app_id="py", audio=sc.PushAudio(16000, 1), cache_dir=cache_dir) as c:
        c.start()
        t0 = time.monotonic()
        for k, off in enumerate(range(0, len(pcm), 3200)):
            c.push(memoryview(pcm)[off:off + 3200])
            time.sleep(max(0.0, t0 + (k + 1) * 0.1 - time.monotonic()))
        c.stop()
        updates = without_states(c.updates(timeout=30))
    segments = [u for u in updates if isinstance(u, sc.Segment)]
    tentative = [s.transcript for s in segments if not s.final]
    finals = [s for s in segments if s.final]
    assert tentative and len(finals) == 1, updates
    assert finals[0].transcript.startswith("turn off"), (tentative, finals)
    assert finals[0].transcript == tentative[-1]
    assert all(w.final for w in finals[0].words)
    assert isinstance(updates[-1], sc.StopEvent)


# -- stream(): asyncio on application delivery --------------------------------------------------

def reads(loop, fd):
    """Whether `loop` watches fd for reading (asyncio has no public query: its selector's key)."""
    try:
        return loop._selector.get_key(fd).data[0] is not None
    except KeyError:
        return False


def assert_kitchen_lights(updates):
    updates = without_states(updates)
    assert isinstance(updates[0], sc.StartEvent) and updates[-1] == sc.StopEvent(updates[0].context_id)
    segments = [u for u in updates if isinstance(u, sc.Segment)]
    assert segments and all(s.context_id == updates[0].context_id for s in segments)
    assert any(not s.final for s in segments)  # tentative updates came too
    final = [s for s in segments if s.final][-1]
    assert final.transcript == "turn on the kitchen lights"
    assert final.intent == sc.Intent("turn_on", True)
    assert final.entities == (sc.Entity("room", "kitchen", 3, 4, True),)


def test_stream_transcribes_a_wav_file(server, synthesize, cache_dir):
    wav = synthesize("turn on the kitchen lights")
    threads = set()

    async def run():
        with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir,
                       delivery="application", on_segment=lambda s: threads.add(threading.get_ident())) as c:
            updates = [update async for update in c.stream(timeout=30)]
            assert not reads(asyncio.get_running_loop(), c.event_fd)
            assert c.state == sc.State.IDLE
            return updates

    assert_kitchen_lights(asyncio.run(asyncio.wait_for(run(), 60)))
    assert threads == {threading.get_ident()}  # the loop's thread ran every callback


@pytest.mark.parametrize("kind", ["async", "self"])
def test_stream_transcribes_pushed_pcm(kind, server, synthesize, cache_dir):
    """kind "async": an async generator paced at 4x real time, given to stream(); "self": the
    loop body pushes the whole utterance after the start event, then push_end()."""
    with wave.open(str(synthesize("turn on the kitchen lights"))) as w:
        pcm = w.readframes(w.getnframes())

    async def chunks():
        for off in range(0, len(pcm), 3200):  # 100 ms
            yield memoryview(pcm)[off:off + 3200]
            await asyncio.sleep(0.025)

    async def run():
        with sc.Client(url=server.url, app_id="py", audio=sc.PushAudio(16000, 1), cache_dir=cache_dir,
                       delivery="application") as c:
            updates = []
            async for update in c.stream(chunks() if kind == "async" else None, timeout=30):
                updates.append(update)
                if kind == "self" and isinstance(update, sc.StartEvent):
                    c.push(pcm)
                    c.push_end()
            return updates

    assert_kitchen_lights(asyncio.run(asyncio.wait_for(run(), 60)))


def test_breaking_out_of_a_stream_leaves_the_client_usable(server, synthesize, cache_dir):
    wav = synthesize("turn on the kitchen lights")

    async def run():
        loop = asyncio.get_running_loop()
        with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir,
                       delivery="application") as c:
            fd = c.event_fd
            async for update in c.stream(timeout=30):
                if isinstance(update, sc.Segment):
                    first = update
                    break
            assert not reads(loop, fd)  # removed at the break, not later
            # Right away, while the first context may still be stopping: a whole second run.
            second = [update async for update in c.stream(timeout=30)]
            assert not reads(loop, fd)
            assert c.wait_idle(10) and c.state == sc.State.IDLE
            return first, second

    first, second = asyncio.run(asyncio.wait_for(run(), 60))
    assert_kitchen_lights(second)
    assert first.context_id != without_states(second)[0].context_id
