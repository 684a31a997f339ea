"""The binding against the real reference server (marked e2e: they fail when the package
speechclient_server is not installed; see conftest.py)."""
import asyncio
import json
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


def test_a_client_idle_between_contexts_uses_no_cpu(server, cache_dir):
    """After a context the connection stays open for the next one, with no stream on it. Its
    keepalive timer was due at once, for ever (the last receipt was long past): the event loop
    spun, half a core for as long as the client waited (2.7 CPU s over 6 s idle here). A
    1 s keepalive interval makes the spin start within the test; the bound is loose on
    purpose: it tells a busy loop (seconds) from an idle one (milliseconds)."""
    with sc.Client(url=server.url, app_id="py", audio=sc.PushAudio(), cache_dir=cache_dir,
                   keepalive=(1000, 500)) as c:
        c.start()
        c.push(bytes(16000))
        c.stop()
        list(c.updates(timeout=30))
        assert c.wait_idle(5)
        t0 = time.process_time()
        time.sleep(4)
        used = time.process_time() - t0
        assert used < 0.5, f"{used:.2f} CPU s over 4 s idle"
        c.start()  # the connection still works
        c.push(bytes(16000))
        c.stop()
        updates = without_states(c.updates(timeout=30))
        assert isinstance(updates[-1], sc.StopEvent) and not any(isinstance(u, sc.ErrorEvent) for u in updates)


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


def test_pushed_bytes_in_pieces_of_any_size_are_transcribed_whole(server, synthesize, cache_dir):
    """Pieces of 333 bytes (an odd count, as a pipe or a socket hands them out): every frame
    reaches the library in order, the split ones put together again (issue 19 item 7)."""
    with wave.open(str(synthesize("turn on the kitchen lights"))) as w:
        pcm = w.readframes(w.getnframes())
    with sc.Client(url=server.url, app_id="py", audio=sc.PushAudio(16000, 1), cache_dir=cache_dir,
                   push_wait_ms=10000) as c:
        c.start()
        for off in range(0, len(pcm), 333):
            c.push(pcm[off:off + 333])
        c.push_end()
        updates = without_states(c.updates(timeout=30))
    assert [u.transcript for u in updates if isinstance(u, sc.Segment) and u.final] == ["turn on the kitchen lights"]


def test_cli_json_is_the_c_demos(server, synthesize, cache_dir):
    if not DEMO.exists():
        pytest.fail("build/speechclient-demo is not built: run `make demo` first (`make test-python` does)")
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


def test_application_io_in_an_asyncio_loop(server, synthesize, cache_dir):
    """io="application": the loop's thread reads the connection (io_process on io_fd) and runs the
    callbacks; the words are those of the library-read case."""
    wav = synthesize("turn on the kitchen lights")
    served = []

    def process():
        served.append(sc.io_process())

    async def run():
        loop = asyncio.get_running_loop()
        loop.add_reader(sc.io_fd(), process)
        try:
            with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir,
                           delivery="application", io="application") as c:
                assert c.io == sc.NetworkIO.APPLICATION
                return [update async for update in c.stream(timeout=30)]
        finally:
            loop.remove_reader(sc.io_fd())

    assert_kitchen_lights(asyncio.run(asyncio.wait_for(run(), 60)))
    assert sum(served) > 0  # responses were read on the loop's thread


def test_io_dispatch_runs_the_callbacks_in_the_network_work(server, synthesize, cache_dir):
    """io_dispatch() in place of io_process(): the segments' callbacks run inside it, on the
    loop's thread, and the words are the same."""
    wav = synthesize("turn on the kitchen lights")
    counts = []

    async def run():
        loop = asyncio.get_running_loop()
        loop.add_reader(sc.io_fd(), lambda: counts.append(sc.io_dispatch()))
        # Served by this thread from the first call on (until then the library's loop thread
        # serves the set): made before the client exists, so that a slow start of this thread
        # (stop 33's CI, on a loaded machine) cannot leave every response to the loop thread.
        sc.io_dispatch()
        try:
            with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir,
                           delivery="application", io="application") as c:
                return [update async for update in c.stream(timeout=30)]
        finally:
            loop.remove_reader(sc.io_fd())

    assert_kitchen_lights(asyncio.run(asyncio.wait_for(run(), 60)))
    assert sum(ready for ready, _ in counts) > 0
    assert sum(ran for _, ran in counts) > 0  # callbacks ran inside io_dispatch


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


# -- hands-free listening and levels (issue 8) ---------------------------------------------------

PHRASES = ["turn on the kitchen lights", "stop the music"]
LEAD_MS = 1000
GAP_MS = 2000


@pytest.fixture
def two_phrases(synthesize, tmp_path):
    """PHRASES spoken after LEAD_MS of silence, GAP_MS apart, then GAP_MS of silence (16 kHz mono).
    Returns the WAV and each phrase's first and last loud millisecond."""
    import numpy as np  # installed by scripts/setup-debian.sh
    parts, spans, at = [np.zeros(16 * LEAD_MS, dtype=np.int16)], [], 16 * LEAD_MS
    for text in PHRASES:
        with wave.open(str(synthesize(text))) as w:
            clip = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        frames = clip[: len(clip) // 320 * 320].reshape(-1, 320).astype(np.float64)
        loud = np.nonzero(10 * np.log10((frames ** 2).mean(axis=1) / 32768 ** 2 + 1e-10) > -45)[0]
        spans.append(((at + loud[0] * 320) // 16, (at + (loud[-1] + 1) * 320) // 16))
        parts += [clip, np.zeros(16 * GAP_MS, dtype=np.int16)]
        at += len(clip) + 16 * GAP_MS
    path = tmp_path / "two-phrases.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.concatenate(parts).tobytes())
    return path, spans


def listens(updates, *kinds):
    return [u for u in updates if isinstance(u, sc.ListenEvent) and (not kinds or u.event in kinds)]


def assert_a_context_per_phrase(updates, spans):
    """Two contexts, each from its start to its stop with its phrase, and an activation per
    phrase. How listen events interleave with a context's events is not fixed (the detector
    reads a file ahead of the server's answers), so contexts are told apart by their ids."""
    updates = without_states(updates)
    starts = [u.context_id for u in updates if isinstance(u, sc.StartEvent)]
    stops = [u.context_id for u in updates if isinstance(u, sc.StopEvent)]
    assert len(starts) == 2 and starts == stops and len(set(starts)) == 2 and all(starts), updates
    for context_id, text in zip(starts, PHRASES):
        first = updates.index(sc.StartEvent(context_id))
        last = updates.index(sc.StopEvent(context_id))
        segments = [u for u in updates if isinstance(u, sc.Segment) and u.context_id == context_id]
        assert segments and all(first < updates.index(s) < last for s in segments)
        assert [s.transcript for s in segments if s.final] == [text]
    assert not [u for u in updates if isinstance(u, sc.ErrorEvent)]
    pairs = listens(updates, sc.Listen.ACTIVATE, sc.Listen.DEACTIVATE)
    assert [u.event for u in pairs] == [sc.Listen.ACTIVATE, sc.Listen.DEACTIVATE] * 2, pairs
    positions = [u.position_ms for u in pairs]
    assert positions == sorted(positions) and len(set(positions)) == 4
    for (begin, end), activate, deactivate in zip(spans, positions[0::2], positions[1::2]):
        assert begin - 100 <= activate <= begin + 300, (spans, positions)  # as test_hands_free_e2e
        assert end <= deactivate <= end + GAP_MS, (spans, positions)  # after the trailing silence
    heard = listens(updates, sc.Listen.SPEECH, sc.Listen.SILENCE)
    assert [u.event for u in heard] == [sc.Listen.SPEECH, sc.Listen.SILENCE] * 2, heard
    assert not listens(updates, sc.Listen.TIMEOUT)


def test_voice_activation_gives_a_context_per_phrase(server, two_phrases, cache_dir):
    wav, spans = two_phrases
    called = []
    with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir, activation="voice",
                   on_listen=called.append) as c:
        c.start()
        updates = list(c.updates(timeout=30))  # the whole listening: both contexts
        assert c.wait_idle(5) and c.state == sc.State.IDLE
    assert_a_context_per_phrase(updates, spans)
    assert called == listens(updates)  # the callback saw the same events, in the same order
    assert not [u for u in updates if isinstance(u, sc.LevelEvent)]  # only when asked for


def test_voice_activation_through_aupdates_and_stream(server, two_phrases, cache_dir):
    wav, spans = two_phrases

    async def run():
        with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir,
                       activation="voice") as c:
            c.start()
            through_aupdates = [u async for u in c.aupdates(timeout=30)]
        with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir,
                       activation="voice", delivery="application") as c:
            through_stream = [u async for u in c.stream(timeout=30)]
            assert c.state == sc.State.IDLE
        return through_aupdates, through_stream

    through_aupdates, through_stream = asyncio.run(asyncio.wait_for(run(), 90))
    assert_a_context_per_phrase(through_aupdates, spans)
    assert_a_context_per_phrase(through_stream, spans)  # the stream did not end at the first stop


def test_breaking_out_of_a_hands_free_stream_keeps_its_rest_out_of_the_next(server, two_phrases, cache_dir):
    wav, spans = two_phrases

    async def run():
        with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir,
                       activation="voice", delivery="application") as c:
            async for update in c.stream(timeout=30):
                if isinstance(update, sc.Segment):
                    first = update
                    break
            # Right away: this waits for the abandoned listening to end, then listens again.
            second = [u async for u in c.stream(timeout=30)]
            assert c.state == sc.State.IDLE
            return first, second, list(c.updates(timeout=5))

    first, second, rest = asyncio.run(asyncio.wait_for(run(), 90))
    assert_a_context_per_phrase(second, spans)
    assert first.context_id not in {u.context_id for u in second if isinstance(u, (sc.StartEvent, sc.StopEvent))}
    # The abandoned listening's remaining updates went to the shared queue, ending with the
    # stop of the context that was open.
    assert sc.StopEvent(first.context_id) in rest


@pytest.mark.parametrize("activation", ["manual", "voice"])
def test_levels_cover_the_audio_chunk_by_chunk(activation, server, two_phrases, cache_dir):
    wav, spans = two_phrases
    with wave.open(str(wav)) as w:
        chunks = -(-w.getnframes() // 1600)  # 100 ms chunks, the last one partial
    with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir, activation=activation,
                   levels=True) as c:
        c.start()
        updates = list(c.updates(timeout=30))
    levels = [u for u in updates if isinstance(u, sc.LevelEvent)]
    assert [u.position_ms for u in levels] == list(range(0, 100 * chunks, 100))
    assert all(-100.0 <= u.dbfs <= 0.0 for u in levels)
    by_position = {u.position_ms: u.dbfs for u in levels}
    assert all(by_position[ms] == -100.0 for ms in range(0, LEAD_MS - 100, 100))  # digital silence
    loud = [by_position[ms] for begin, end in spans for ms in range(begin // 100 * 100, end, 100)]
    assert max(loud) > -30, loud  # speech is heard
    finals = [u.transcript for u in updates if isinstance(u, sc.Segment) and u.final]
    assert " ".join(finals) == " ".join(PHRASES)  # the levels cost no audio


def test_voice_listening_to_silence_ends_without_a_context(server, tmp_path, cache_dir):
    silence = tmp_path / "silence.wav"
    with wave.open(str(silence), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * 48000)  # 3 s
    with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(silence), cache_dir=cache_dir,
                   activation="voice") as c:
        c.start()
        # No context opens, so no StopEvent comes: the iterator must end on the listening's end.
        updates = list(c.updates(timeout=20))
        assert without_states(updates) == [] and c.state == sc.State.IDLE
        # That listening was seen to end: a new iterator waits for a new start.
        with pytest.raises(sc.SpeechTimeoutError):
            list(c.updates(timeout=0.5))
        c.start()
        assert without_states(c.updates(timeout=20)) == []

        async def through_aupdates():
            c.start()
            return [u async for u in c.aupdates(timeout=20)]
        assert without_states(asyncio.run(asyncio.wait_for(through_aupdates(), 30))) == []


def cli_and_demo(own_server, wav, tmp_path, *flags):
    """The Python CLI, then the C demo, on the same file with the same flags, each with its own
    token cache and its own fresh server (so that neither the other run nor earlier tests can
    change what the server answers); both must succeed."""
    if not DEMO.exists():
        pytest.fail("build/speechclient-demo is not built: run `make demo` first (`make test-python` does)")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "bindings" / "python"))
    runs = []
    for name, command in (("py", [sys.executable, "-m", "speechclient"]), ("c", [str(DEMO)])):
        args = ["--url", own_server().url, "--app-id", "py", "--file", str(wav), "--cache-dir", str(tmp_path / name),
                *flags]
        runs.append(subprocess.run([*command, *args], capture_output=True, text=True, env=env, timeout=90))
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    return runs


def sources(out):
    """The lines of each source in order, context ids normalised. The detector, the level meter
    and the server's answers reach the output in an order that differs from run to run in the C
    demo itself (a file is read ahead of the answers), so each is compared apart."""
    lines = [re.sub(r'"context_id":"[^"]*"', '"context_id":"*"', line) for line in out.splitlines()]
    kind = lambda line: re.match(r'\{"type":"(\w+)"', line).group(1)
    return {k: [line for line in lines if (kind(line) if kind(line) in ("listen", "level") else "rest") == k]
            for k in ("listen", "level", "rest")}


@pytest.mark.parametrize("extra", [[], ["--levels"]])
def test_cli_hands_free_json_is_the_c_demos(extra, own_server, two_phrases, tmp_path):
    wav, _ = two_phrases
    # One pair, compared exactly, tentative updates included: each run has a fresh server, and
    # every server start measures the same warm CMN (its warm-up speech is the same bytes every
    # time), so the server answers the same audio the same way.
    outputs = [r.stdout for r in cli_and_demo(own_server, wav, tmp_path, "--hands-free", "--json", *extra)]
    py, c = sources(outputs[0]), sources(outputs[1])
    assert py == c
    events = [json.loads(line)["event"] for line in py["listen"]]
    assert events == ["speech", "activate", "silence", "deactivate"] * 2
    finals = [json.loads(line)["transcript"] for line in py["rest"] if '"final":true,"transcript"' in line]
    assert finals == PHRASES
    assert bool(py["level"]) == bool(extra)


def test_endpointing_cuts_a_long_activation_with_a_timeout(server, two_phrases, cache_dir):
    wav, spans = two_phrases
    # At most 600 ms per activation: each phrase (over a second) is cut, TIMEOUT then DEACTIVATE,
    # and the speech still going on opens the next activation.
    with sc.Client(url=server.url, app_id="py", audio=sc.WavFile(wav), cache_dir=cache_dir, activation="voice",
                   endpointing=(0, 1000, 0, 600)) as c:
        c.start()
        updates = list(c.updates(timeout=30))
    events = listens(updates, sc.Listen.ACTIVATE, sc.Listen.TIMEOUT, sc.Listen.DEACTIVATE)
    assert all(end - begin > 1000 for begin, end in spans)
    cut = [(a.position_ms, t.position_ms, d.position_ms) for a, t, d in zip(events, events[1:], events[2:])
           if (a.event, t.event, d.event) == (sc.Listen.ACTIVATE, sc.Listen.TIMEOUT, sc.Listen.DEACTIVATE)]
    assert len(cut) >= 2, events
    # The length counts from the first 100 ms chunk the context is sent (no pre-roll here).
    assert all(500 < t - a <= 600 and d == t for a, t, d in cut), cut


def test_cli_hands_free_text_is_the_c_demos(own_server, two_phrases, tmp_path):
    wav, _ = two_phrases
    runs = cli_and_demo(own_server, wav, tmp_path, "--hands-free", "--levels")  # --levels prints nothing without --json
    assert runs[0].stdout == runs[1].stdout
    assert runs[0].stdout.splitlines()[-1] == "stop the music  [intent: stop_music]"
    assert "turn on the kitchen lights  [intent: turn_on]  [room: kitchen]" in runs[0].stdout.splitlines()


def test_an_audio_stream_reads_a_pipe_and_each_start_reads_on(server, synthesize, cache_dir):
    """AudioStream (0.9): the library reads the pipe itself. Two phrases written one after the
    other: the first start is stopped after the first phrase's words, the second start reads on
    and gets the second phrase, the end of the stream stops it."""
    first = synthesize("turn on the kitchen lights")
    second = synthesize("what time is it")
    with wave.open(str(first)) as w:
        pcm1 = w.readframes(w.getnframes()) + bytes(16000)
    with wave.open(str(second)) as w:
        pcm2 = w.readframes(w.getnframes()) + bytes(16000)
    r, wfd = os.pipe()
    try:
        with sc.Client(url=server.url, app_id="py", audio=sc.AudioStream(r, 16000, 1), cache_dir=cache_dir) as c:
            os.write(wfd, pcm1[:32768])
            writer = threading.Thread(target=lambda: os.write(wfd, pcm1[32768:]))
            writer.start()
            c.start()
            finals, stopped = [], False
            for update in c.updates(timeout=30):
                if isinstance(update, sc.Segment):
                    if update.final:
                        finals.append(update.transcript)
                    if update.transcript == "turn on the kitchen lights" and not stopped:
                        c.stop()  # the pipe stays open: the rest is the next context's
                        stopped = True
            writer.join()
            assert finals == ["turn on the kitchen lights"]
            writer = threading.Thread(target=lambda: (os.write(wfd, pcm2), os.close(wfd)))
            writer.start()
            c.start()
            finals = [u.transcript for u in c.updates(timeout=30) if isinstance(u, sc.Segment) and u.final]
            writer.join()
            assert finals == ["what time is it"]
    finally:
        os.close(r)


def test_cli_shows_a_progress_bar_for_a_file_on_a_terminal(server, synthesize, cache_dir):
    """Issue 22: on a terminal the live line starts with how far into the file the words heard
    reach; the final line is printed clean (the live line erased first)."""
    import pty
    wav = synthesize("turn on the kitchen lights")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "bindings" / "python"))
    leader, follower = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "speechclient", "--url", server.url, "--file", str(wav),
                          "--cache-dir", cache_dir], stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert p.wait(timeout=60) == 0, p.stderr.read()
    text = out.decode()
    assert re.search(r"\[#*\.*\]\s+\d+% \.\.\. turn", text), text
    # The bar only moves forward, and the words reach well into the file (its tail is silence).
    percents = [int(p) for p in re.findall(r"\] +(\d+)% ", text)]
    assert percents == sorted(percents) and percents[-1] >= 50, percents
    assert "\rturn on the kitchen lights  [intent: turn_on]  [room: kitchen]\r\n" in text, text


# The idle event (0.11): hands-free listening to silence opens no context, so nothing but the
# end of the work says the listening is over. With every poll interval of the binding set to a
# minute, the iterators still end at once: woken by the idle event, not by a poll.
@pytest.fixture
def no_polling(monkeypatch):
    from speechclient import _aio, client
    for module in (client, _aio):
        monkeypatch.setattr(module, "_IDLE_POLL_S", 60.0)
        monkeypatch.setattr(module, "_WAIT_SLICE_S", 60.0)


@pytest.mark.parametrize("how", ["updates-thread", "updates-application", "aupdates-thread",
                                 "aupdates-application", "stream", "wait_idle-application"])
def test_the_end_of_listening_wakes_the_iterators(how, server, cache_dir, no_polling):
    delivery = "application" if how.endswith("application") or how == "stream" else "thread"
    c = sc.Client(url=server.url, app_id="py", audio=sc.PushAudio(16000, 1), cache_dir=cache_dir,
                  activation="voice", delivery=delivery)
    assert c._idle_announced
    silence = b"\0\0" * 8000  # 0.5 s
    stopped_at = []

    def stop_later():
        time.sleep(0.5)
        stopped_at.append(time.monotonic())
        c.stop()

    async def through_aupdates():
        return [u async for u in c.aupdates(timeout=30)]

    async def through_stream():
        return [u async for u in c.stream([silence] * 2, timeout=30)]

    with c:
        if how != "stream":
            c.start()
            c.push(silence)
            stopper = threading.Thread(target=stop_later)
            stopper.start()
        if how.startswith("updates"):
            updates = list(c.updates(timeout=30))
        elif how.startswith("aupdates"):
            updates = asyncio.run(asyncio.wait_for(through_aupdates(), 30))
        elif how == "stream":
            stopped_at.append(time.monotonic())  # push_end after 1 s of audio ends the listening
            updates = asyncio.run(asyncio.wait_for(through_stream(), 30))
        else:
            assert c.wait_idle(30)
            updates = []
        ended = time.monotonic()
        if how != "stream":
            stopper.join()
        assert c.state == sc.State.IDLE
    assert not [u for u in updates if isinstance(u, (sc.StartEvent, sc.StopEvent, sc.Segment))], updates
    assert ended - stopped_at[0] < 10, f"{how}: ended {ended - stopped_at[0]:.1f} s after the stop"


def start_grow_server():
    """Tests/peers/hostile_slu_server.py, scenario Grow with no words: it takes the audio and
    never finalises any, so a replay buffer stays full. Returns the process and its grpc:// URL."""
    peer = subprocess.Popen([sys.executable, str(ROOT / "Tests" / "peers" / "hostile_slu_server.py"),
                             "--scenario", "Grow", "--words", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env={"PYTHONPATH": str(ROOT / "server"), "PATH": "/usr/bin:/bin"})
    line = peer.stdout.readline()
    if not line.startswith("listening on "):
        peer.kill()
        peer.wait()
        raise AssertionError(f"the Grow server did not start: {line!r}")
    return peer, "grpc://" + line.split()[-1]


def test_close_ends_a_push_waiting_for_room(cache_dir):
    """A push waiting for room in the replay buffer (push_wait_ms) held close() from another
    thread, and Ctrl-C, for the whole wait (here ten minutes): close() waited for every call in
    the library to return first. The server (Tests/peers/hostile_slu_server.py, Grow with no
    words) takes the audio and never finalises any, so the buffer stays full."""
    peer, url = start_grow_server()
    try:
        started = threading.Event()
        c = sc.Client(url=url, app_id="py", audio=sc.PushAudio(), cache_dir=cache_dir,
                      push_wait_ms=600_000, replay_buffer_ms=1000, on_start=lambda e: started.set())
        c.start()
        assert started.wait(20)
        pushed = threading.Event()

        def push_too_much():
            try:
                c.push(bytes(2 * 16000 * 3))  # 3 s into a 1 s buffer nobody empties
            except sc.SpeechClientError:
                pass
            pushed.set()

        pusher = threading.Thread(target=push_too_much, daemon=True)
        pusher.start()
        assert not pushed.wait(0.5)  # it waits for room
        closer = threading.Thread(target=c.close, daemon=True)
        began = time.monotonic()
        closer.start()
        closer.join(20)
        took = time.monotonic() - began
        assert not closer.is_alive(), "close() still waited for the push after 20 s"
        assert pushed.wait(5) and c.closed
        print(f"\nclose() during a push waiting for room: {took * 1000:.0f} ms")
    finally:
        peer.stdin.close()
        peer.kill()
        peer.wait()


def test_a_streams_push_waiting_for_room_does_not_hold_the_event_loop(cache_dir):
    """stream(pcm=...) with push_wait_ms: a push waiting for room in the replay buffer waited on
    the event loop's thread, which ran nothing else meanwhile (no callbacks, no timeout, no other
    task, no close()) for up to the whole wait. Same server as above: it takes the audio and
    finalises none, so a 3 s chunk into a 1 s buffer waits."""
    peer, url = start_grow_server()
    try:

        async def run():
            c = sc.Client(url=url, app_id="py", audio=sc.PushAudio(), cache_dir=cache_dir,
                          push_wait_ms=20_000, replay_buffer_ms=1000, delivery="application")
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            tick = asyncio.ensure_future(ticker())
            began = time.monotonic()
            try:
                with pytest.raises(sc.SpeechTimeoutError):
                    async for _ in c.stream(pcm=[bytes(2 * 16000 * 3)], timeout=2):
                        pass
                return ticks, time.monotonic() - began
            finally:
                tick.cancel()
                c.close()

        ticks, took = asyncio.run(asyncio.wait_for(run(), 60))
        # The stream's own 2 s timeout held (its updates had stopped), and the loop ran the
        # other task all along (100 ticks a second).
        assert took < 10, f"the stream's 2 s timeout came after {took:.1f} s"
        assert ticks >= 50, f"{ticks} ticks in {took:.1f} s: the loop was held"
    finally:
        peer.stdin.close()
        peer.kill()
        peer.wait()


def test_wait_idle_raises_a_callbacks_exception_once_the_client_is_idle(server, synthesize, cache_dir):
    """wait_idle() re-raises a callback's exception after its wait. It raised it at the next slice
    of the wait instead (the library calls inside it re-raised it first), with the context still
    open: a close() after it abandoned the context and its last results. With application
    delivery the callbacks run inside wait_idle() itself, so the exception cannot surface at a
    push() before it (as it may with thread delivery)."""
    delivery = "application"
    wav = synthesize("turn on the kitchen lights")
    with wave.open(str(wav)) as w:
        pcm = w.readframes(w.getnframes())
    stops = []

    def on_start(event):
        raise ValueError("from on_start")

    with sc.Client(url=server.url, app_id="py", audio=sc.PushAudio(), cache_dir=cache_dir, delivery=delivery,
                   on_start=on_start, on_stop=stops.append) as c:
        c.start()
        for i in range(0, len(pcm), 3200):
            c.push(pcm[i:i + 3200])  # faster than real time: the results come after the wait began
        c.push_end()
        with pytest.raises(ValueError, match="from on_start"):
            c.wait_idle(60)
        assert len(stops) == 1, "wait_idle() raised before the context's stop"
        # Idle when it raised: the state. (wait_idle(0) here failed once in CI: the stream's end,
        # its gRPC trailers after the STOPPED the context ended on, was queued for the worker and
        # made the client not idle for an instant. Fixed in the library, where
        # BoundedStreamTests.theEndOfAFinishedStreamComingLateLeavesTheClientIdle tests it.)
        assert c.state == sc.State.IDLE
        assert c.wait_idle(5)
