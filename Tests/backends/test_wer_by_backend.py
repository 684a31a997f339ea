"""One table (issue 20, "Measure"): the word error rate of the same eight espeak-ng sentences
through the library to each backend, with the same demo command line: the bundled reference
server (Speechly protocol, its Whisper engine), wyoming-faster-whisper (Wyoming) and the
Riva-compatible service (its Whisper engine). Each must stay within the suite's WER bound; the
table is printed for the notes and docs/backends.md."""
import json
import subprocess

import wyomingtools as wt
from speechtools import DEMO, Server
from test_riva_backend import RivaServer
from test_wyoming_peers import SENTENCES, WER_BOUND


def wer_through(url, speech):
    errors = words = 0
    for text in SENTENCES:
        out = subprocess.run([str(DEMO), "--url", url, "--app-id", "wer", "--file", str(speech(text)), "--json"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (url, out.stderr)
        events = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
        said = " ".join(e["transcript"] for e in events if e["type"] == "segment" and e["final"])
        ref = wt.normalize_words(text)
        errors += wt.word_errors(ref, wt.normalize_words(said))
        words += len(ref)
    return errors, words


def test_the_same_sentences_through_every_backend(asr, speech, tmp_path):
    speechly = Server("--engine", "whisper")
    riva = RivaServer("--engine", "whisper")
    try:
        rows = [("Speechly protocol (reference server, Whisper)", speechly.url),
                ("Wyoming (wyoming-faster-whisper)", asr.url),
                ("NVIDIA Riva (Riva-compatible service, Whisper)", riva.url)]
        results = [(name, *wer_through(url, speech)) for name, url in rows]
    finally:
        speechly.stop()
        riva.stop()
    print("\n| backend | words wrong | WER |\n|---|---|---|")
    for name, errors, words in results:
        print(f"| {name} | {errors} of {words} | {errors / words:.1%} |")
    for name, errors, words in results:
        assert errors / words <= WER_BOUND, (name, errors, words)
