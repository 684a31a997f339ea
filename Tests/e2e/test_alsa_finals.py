"""Every segment ends with a final update when a microphone context is stopped right after the
speech (issue 19 item 3): the ALSA file plugin plays espeak-ng speech as a capture device at
8, 16, 44.1 and 48 kHz, and the demo is interrupted 0-0.45 s after the speech ended, the moment
where finals used to go missing (1 run in 2-4 with the file-plugin microphone). Any segment
without a final, or a final without the last word, fails."""
import json
import os
import signal
import subprocess
import time

import pytest

from speechtools import DEMO

PHRASE = "turn on the kitchen lights"
RATES = [8000, 16000, 44100, 48000]
# Seconds after the speech ended (counted from the start event, which comes after the capture
# opened: the speech really ended at least this long before the interrupt).
OFFSETS = [0.0, 0.15, 0.3, 0.45]


@pytest.fixture(scope="module")
def microphones(tmp_path_factory, speech_module):
    """One capture device per rate: the file plugin reads the speech as raw PCM at that rate
    (nothing after it: the plugin then returns zeros), and a plug in front of it with resampling
    off, so the library negotiates exactly that rate."""
    d = tmp_path_factory.mktemp("alsa-finals")
    wav = speech_module(PHRASE)
    duration = float(subprocess.run(["soxi", "-D", str(wav)], capture_output=True, text=True,
                                    check=True).stdout)
    conf = ["</usr/share/alsa/alsa.conf>"]
    for rate in RATES:
        raw = d / f"speech{rate}.raw"
        subprocess.run(["sox", "-R", str(wav), "-t", "raw", "-r", str(rate), "-c", "1", "-b", "16",
                        "-e", "signed-integer", str(raw)], check=True)
        conf.append(f'pcm.raw{rate} {{ type file; slave.pcm "null"; file "/dev/null"; '
                    f'infile "{raw}"; format "raw" }}')
        conf.append(f'pcm.mic{rate} {{ type plug; slave {{ pcm "raw{rate}"; rate {rate}; '
                    f'channels 1; format S16_LE }} }}')
    (d / "asound.conf").write_text("\n".join(conf) + "\n")
    return d / "asound.conf", duration


@pytest.fixture(scope="module")
def speech_module(tmp_path_factory):
    from speechtools import synthesize
    d = tmp_path_factory.mktemp("alsa-finals-speech")
    return lambda text: synthesize(text, d / "phrase.wav")


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("rate", RATES)
def test_a_context_stopped_right_after_speech_ends_every_segment_final(server, microphones, tmp_path,
                                                                       rate, offset):
    conf, duration = microphones
    env = dict(os.environ, ALSA_CONFIG_PATH=str(conf))
    p = subprocess.Popen([str(DEMO), "--url", server.url, "--app-id", "e2e", "--mic", f"mic{rate}",
                          "--json", "--verbose", "--cache-dir", str(tmp_path / "cache")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            if json.loads(line)["type"] == "start":
                break
        else:
            pytest.fail("no start event: " + "".join(lines) + (p.stderr.read() if p.stderr else ""))
        time.sleep(duration + offset)
        p.send_signal(signal.SIGINT)
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    out = "".join(lines) + rest
    assert p.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert f"{rate} Hz" in err or rate == 16000, "the device did not run at the rate under test: " + err
    updates = {}
    for e in events:
        if e["type"] == "segment":
            updates.setdefault((e["context_id"], e["segment_id"]), []).append(e)
    assert updates, out
    for key, seg in updates.items():
        assert seg[-1]["final"], f"segment {key} ended without a final update:\n{out}"
        assert sum(1 for u in seg if u["final"]) == 1, f"segment {key} has more than one final:\n{out}"
    words = [w["text"] for key in sorted(updates, key=lambda k: k[1]) for w in updates[key][-1]["words"]]
    assert words and words[-1] == "lights", f"the last word is missing from the finals {words}:\n{out}"
    assert events[-1]["type"] == "stop", out
