"""The C demo transcribes synthesized speech through the library against the real server."""
import json
import subprocess

import pytest

from speechtools import DEMO


def run_demo(server, wav, tmp_path, *extra):
    return subprocess.run([str(DEMO), "--url", server.url, "--app-id", "e2e", "--file", str(wav),
                           "--cache-dir", str(tmp_path / "cache"), "--json", *extra],
                          capture_output=True, text=True, timeout=60)


def test_demo_transcribes_a_command(server, speech, tmp_path):
    wav = speech("turn on the kitchen lights")
    out = run_demo(server, wav, tmp_path)
    assert out.returncode == 0, out.stderr
    every = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    # The connection states come first: connecting, then ready, before the context starts.
    assert [e["state"] for e in every if e["type"] == "state"] == ["connecting", "ready"], every
    events = [e for e in every if e["type"] != "state"]
    types = [e["type"] for e in events]
    assert types[0] == "start" and types[-1] == "stop"
    finals = [e for e in events if e["type"] == "segment" and e["final"]]
    assert finals, events
    assert finals[-1]["transcript"] == "turn on the kitchen lights"
    assert finals[-1]["intent"] == {"intent": "turn_on", "final": True}
    assert {"type": "room", "value": "kitchen"}.items() <= finals[-1]["entities"][0].items()
    words = finals[-1]["words"]
    assert [w["index"] for w in words] == list(range(len(words)))
    assert all(w["start_ms"] < w["end_ms"] for w in words)
    assert all(a["end_ms"] <= b["start_ms"] + 1 for a, b in zip(words, words[1:]))
    # tentative updates came before the final one
    assert any(e["type"] == "segment" and not e["final"] for e in events)


def test_demo_resamples_44k_stereo(server, speech, tmp_path):
    wav = speech("turn off the bedroom lights", rate=44100, channels=2)
    out = run_demo(server, wav, tmp_path)
    assert out.returncode == 0, out.stderr
    finals = [json.loads(l) for l in out.stdout.splitlines() if '"final":true' in l and '"segment"' in l]
    assert finals and finals[-1]["transcript"] == "turn off the bedroom lights"


def test_a_wav_cut_short_is_transcribed_with_a_warning_naming_what_is_missing(server, speech, tmp_path):
    """Issue 19 item 7: a copy cut short (its data chunk declares more than the file holds) was
    streamed silently; now a warning says how much is missing, then what there is is streamed."""
    wav = speech("turn on the kitchen lights and then play some jazz music")
    data = wav.read_bytes()
    cut = tmp_path / "cut.wav"
    cut.write_bytes(data[:len(data) * 6 // 10])  # the header still declares the whole take
    out = run_demo(server, cut, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "the data chunk declares" in out.stderr and "s are missing" in out.stderr, out.stderr
    events = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    finals = [e for e in events if e["type"] == "segment" and e["final"]]
    assert finals and finals[0]["transcript"].startswith("turn on the kitchen lights"), out.stdout


@pytest.mark.parametrize("suffix, named", [("flac", "a FLAC file, not WAV"), ("ogg", "an Ogg file")])
def test_a_compressed_file_is_refused_naming_its_format(server, speech, tmp_path, suffix, named):
    """Issue 19 item 7: FLAC and Ogg files (made by sox from speech) were 'not a RIFF file'."""
    wav = speech("stop the music")
    other = tmp_path / f"speech.{suffix}"
    subprocess.run(["sox", "-R", str(wav), str(other)], check=True)
    out = run_demo(server, other, tmp_path)
    assert out.returncode == 1
    error = [json.loads(l) for l in out.stdout.splitlines() if '"type":"error"' in l][0]
    assert error["code"] == "audio error" and named in error["message"] and "sox" in error["message"], error
