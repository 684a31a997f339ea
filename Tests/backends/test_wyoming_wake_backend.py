"""Wakeword activation through a real wake-word service (issue 20): the C demo with
`--wakeword-url wyoming://...` (wyoming-openwakeword, hey_jarvis) and the real
wyoming-faster-whisper as the recognizer. flite's voice says the wake word, espeak-ng the
command after it; the file is read at real time while listening, as the service needs."""
import json
import subprocess
import time

import wyomingtools as wt
from speechtools import DEMO

COMMAND = "turn on the kitchen lights"


def listen(asr, wake, wav, *more, timeout=120):
    began = time.monotonic()
    out = subprocess.run([str(DEMO), "--url", asr.url, "--file", str(wav), "--json",
                          "--wakeword-url", wake.url, *more], capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - began
    events = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return out, events, took


def test_the_wake_word_opens_one_context_with_the_command_after_it(asr, wake, speech, flite_speech, tmp_path):
    wav = wt.concat_wavs([flite_speech("hey jarvis", lead_s=1.0, tail_s=0.2), speech(COMMAND)],
                         tmp_path / "wake.wav", gap_s=0.0)
    wav = wt.concat_wavs([wav], tmp_path / "wake_padded.wav", gap_s=1.5)
    seconds = len(wt.read_wav(wav)[0]) / 32000
    out, events, took = listen(asr, wake, wav, "--wakeword", "hey_jarvis")
    assert out.returncode == 0, out.stderr
    kinds = [e["type"] for e in events if e["type"] != "state"]
    listens = [e for e in events if e["type"] == "listen" and e["event"] in ("activate", "deactivate")]
    finals = [e for e in events if e["type"] == "segment" and e["final"]]
    print(f"\nfigure: wake word at {listens[0]['position_ms'] if listens else None} ms of a {seconds:.1f} s file "
          f"(read in {took:.1f} s); transcript {[e['transcript'] for e in finals]}")
    # One burst of detections, one context: activate, start, the command, deactivate, stop.
    assert [e["event"] for e in listens] == ["activate", "deactivate"], events
    # The activation names the wake word the service heard (0.8: spc_listen_name).
    assert listens[0]["name"].startswith("hey_jarvis") and "name" not in listens[1], listens
    assert kinds.count("start") == 1 and kinds.count("stop") == 1, kinds
    assert kinds.index("start") > kinds.index("listen")
    words = wt.normalize_words(" ".join(e["transcript"] for e in finals))
    assert " ".join(words).endswith("kitchen lights"), words
    assert set(COMMAND.split()) <= set(words), words   # nothing said right after the wake word is cut
    # Detected where it was said (flite's 'hey jarvis' at 2.5-3.5 s; measured: 3.7 s, the service
    # stamps the end of its 80 ms frame), not at the end of the file.
    assert 2500 <= listens[0]["position_ms"] <= 4500, listens
    # Paced: a file is read at real time while a wake service listens.
    assert took >= seconds * 0.9


def test_audio_without_the_wake_word_opens_no_context(asr, wake, speech, flite_speech, tmp_path):
    wav = wt.concat_wavs([flite_speech(COMMAND, 0.3, 0.3), speech("please send the report to the team by friday")],
                         tmp_path / "none.wav", gap_s=0.5)
    out, events, _ = listen(asr, wake, wav, "--wakeword", "hey_jarvis")
    assert out.returncode == 0, out.stderr
    assert not [e for e in events if e["type"] in ("start", "segment")], events
    assert not [e for e in events if e["type"] == "listen" and e["event"] == "activate"], events


def test_a_wake_word_the_service_lacks_is_refused_naming_what_it_has(asr, wake, speech):
    out, events, _ = listen(asr, wake, speech(COMMAND), "--wakeword", "hey_nobody")
    assert out.returncode != 0
    assert "hey_jarvis_v0.1" in out.stdout + out.stderr and "hey_nobody" in out.stdout + out.stderr


def test_a_recognizer_is_not_a_wake_service(asr, speech):
    out, events, _ = listen(asr, asr, speech(COMMAND))
    assert out.returncode != 0
    assert "not a Wyoming wake-word service" in out.stdout + out.stderr


def test_a_wake_service_killed_while_listening_is_reconnected(asr, speech, flite_speech, tmp_path):
    """SIGKILL of the wake service once the client listens to it (its log says so), the same
    service back on its port: the client reports the loss, reconnects (every 2 s) and hears the
    wake word said after it. (Restarted from this thread: the peer dies with the thread that
    started it.)"""
    wake = wt.WyomingWake()
    try:
        command = wt.concat_wavs([flite_speech("hey jarvis", lead_s=0.5, tail_s=0.2), speech(COMMAND)],
                                 tmp_path / "later.wav")
        silence = wt.concat_wavs([], tmp_path / "silence.wav", gap_s=7.0)
        wav = wt.concat_wavs([silence, command], tmp_path / "killed.wav", gap_s=0.0)
        wav = wt.concat_wavs([wav], tmp_path / "killed_padded.wav", gap_s=1.5)
        proc = subprocess.Popen([str(DEMO), "--url", asr.url, "--file", str(wav), "--json", "--verbose",
                                 "--wakeword-url", wake.url, "--wakeword", "hey_jarvis"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in proc.stderr:
            if "listening for the wake word" in line:
                break
        else:
            raise AssertionError("the client never connected to the wake service")
        wake.kill()
        wake.restart()
        stdout, _ = proc.communicate(timeout=120)
    finally:
        wake.stop()
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    errors = [e for e in events if e["type"] == "error"]
    listens = [e["event"] for e in events if e["type"] == "listen" and e["event"] in ("activate", "deactivate")]
    finals = [e for e in events if e["type"] == "segment" and e["final"]]
    print(f"\nfigure: restarted in {wake.ready_s:.1f} s; errors {[e.get('message', '')[:80] for e in errors]}; "
          f"listen {listens}; transcript {[e['transcript'] for e in finals]}")
    assert any("wake-word service" in e.get("message", "") for e in errors), events
    assert listens == ["activate", "deactivate"], events
    words = wt.normalize_words(" ".join(e["transcript"] for e in finals))
    assert set(COMMAND.split()) <= set(words), words


def two_commands(speech, flite_speech, tmp_path, second="open the garage door"):
    """"hey jarvis" and a command, 1.2 s of silence, "hey jarvis" and another command."""
    first = wt.concat_wavs([flite_speech("hey jarvis", lead_s=1.0, tail_s=0.2), speech(COMMAND)], tmp_path / "w1.wav", gap_s=0.0)
    again = wt.concat_wavs([flite_speech("hey jarvis", lead_s=0.0, tail_s=0.2), speech(second)], tmp_path / "w2.wav", gap_s=0.0)
    wav = wt.concat_wavs([first, again], tmp_path / "two.wav", gap_s=1.2)
    return wt.concat_wavs([wav], tmp_path / "two_padded.wav", gap_s=1.5)


def test_a_wake_word_while_the_last_command_is_still_transcribed_gets_its_own_context(wake, speech, flite_speech, tmp_path):
    """A recognizer slow to finish (4 s after audio-stop; Whisper on a small machine takes
    seconds): the second "hey jarvis" comes while the first context still finishes. It was
    ignored, and the second command lost without a word; its activation waits for that context
    now, and gets its own."""
    slow = wt.FaultServer("Normal", "--transcript-delay", "4", "--close-after-transcript")
    try:
        out, events, _ = listen(slow, wake, two_commands(speech, flite_speech, tmp_path), "--wakeword", "hey_jarvis")
    finally:
        slow.stop()
    assert out.returncode == 0, out.stderr
    kinds = [e["type"] for e in events if e["type"] != "state"]
    listens = [e["event"] for e in events if e["type"] == "listen" and e["event"] in ("activate", "deactivate")]
    finals = [e["transcript"] for e in events if e["type"] == "segment" and e["final"]]
    print(f"\nfigure: {listens}; transcripts {finals}")
    assert kinds.count("start") == 2 and kinds.count("stop") == 2, kinds
    assert listens == ["activate", "deactivate", "activate", "deactivate"], listens
    # Each context heard its command: over a second of audio each ("<bytes> bytes").
    assert len(finals) == 2 and all(int(t.split()[0]) > 32000 for t in finals), finals


def test_two_wake_words_in_a_row_are_two_contexts_with_both_commands(asr, wake, speech, flite_speech, tmp_path):
    """The same with the real Whisper: both commands are transcribed, each in its context, and
    each activation ends at its endpoint, before its words (it came with the stop, seconds late)."""
    out, events, _ = listen(asr, wake, two_commands(speech, flite_speech, tmp_path), "--wakeword", "hey_jarvis")
    assert out.returncode == 0, out.stderr
    kinds = [e["type"] for e in events if e["type"] != "state"]
    listens = [e["event"] for e in events if e["type"] == "listen" and e["event"] in ("activate", "deactivate")]
    finals = [e for e in events if e["type"] == "segment" and e["final"]]
    print(f"\nfigure: {listens}; transcripts {[e['transcript'] for e in finals]}")
    assert kinds.count("start") == 2 and kinds.count("stop") == 2, kinds
    assert listens == ["activate", "deactivate", "activate", "deactivate"], listens
    # The first activation ends before its context's words, which Whisper sends once it has
    # heard the end.
    order = [e["event"] if e["type"] == "listen" else "final" for e in events
             if (e["type"] == "listen" and e["event"] == "deactivate") or (e["type"] == "segment" and e["final"])]
    assert order.index("deactivate") < order.index("final"), order
    words = set(wt.normalize_words(" ".join(e["transcript"] for e in finals)))
    assert {"kitchen", "lights"} <= words and {"garage", "door"} <= words, words
