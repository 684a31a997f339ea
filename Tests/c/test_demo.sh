#!/usr/bin/env bash
# The demo's command line: help, version, usage errors, a missing file, and the JSON lines of
# an error run (against a closed port), each line valid JSON.
set -uo pipefail
demo=${1:?usage: test_demo.sh DEMO}
fail=0
check() { if ! eval "$1"; then echo "test_demo.sh: FAILED: $2"; fail=1; fi; }

"$demo" --help >/dev/null; check "[ $? = 0 ]" "--help exits 0"
"$demo" --version | grep -q "speechclient-demo"; check "[ $? = 0 ]" "--version prints the name"
"$demo" --no-such-option >/dev/null 2>&1; check "[ $? = 2 ]" "an unknown option exits 2"
"$demo" >/dev/null 2>&1; check "[ $? = 2 ]" "no source exits 2"
"$demo" --file a.wav --mic >/dev/null 2>&1; check "[ $? = 2 ]" "two sources exit 2"
"$demo" --file >/dev/null 2>&1; check "[ $? = 2 ]" "--file without a value exits 2"
"$demo" --url ftp://x --file a.wav >/dev/null 2>&1; check "[ $? = 2 ]" "a bad URL exits 2"
err=$("$demo" --url grpc://127.0.0.1:1 --file /nonexistent/x.wav 2>&1 >/dev/null); rc=$?
check "[ $rc = 1 ]" "a missing WAV file exits 1"
check "echo \"\$err\" | grep -q /nonexistent/x.wav" "the message names the missing file"

wav=$(mktemp --suffix=.wav)
python3 - "$wav" <<'PY'
import struct, sys, wave
with wave.open(sys.argv[1], "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
    w.writeframes(struct.pack("<1600h", *([0] * 1600)))
PY
out=$("$demo" --url grpc://127.0.0.1:1 --file "$wav" --json --cache-dir "$(mktemp -d)"); rc=$?
rm -f "$wav"
check "[ $rc = 1 ]" "an error run exits 1"
check "[ \"\$(echo \"\$out\" | wc -l)\" = 2 ]" "an error run prints two lines (got: $out)"
echo "$out" | python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin if l.strip()]
assert [l["type"] for l in lines] == ["error", "stop"], lines
assert lines[0]["code"] == "network error" and lines[0]["status"] == 4 and lines[0]["grpc_status"] == -1, lines
assert "127.0.0.1" in lines[0]["message"] and lines[1]["context_id"] == "", lines
'; check "[ $? = 0 ]" "the error run's JSON lines"
[ "$fail" = 0 ] && echo "test_demo.sh: ok"
exit $fail
