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
# Every option the demo parses is in its --help, its README and its man page.
top=$(cd "$(dirname "$0")/../.." && pwd)
help=$("$demo" --help)
for flag in $(grep -o 'strcmp(arg, "--[a-z-]*")' "$top/bindings/c/speechclient-demo.c" | grep -o -- '--[a-z-]*'); do
  check "grep -q -- '$flag' <<<\"\$help\"" "$flag is missing from --help"
  check "grep -q -- '\`$flag' '$top/bindings/c/README.md'" "$flag is missing from bindings/c/README.md"
  man=$(sed 's/\\-/-/g' "$top/debian/speechclient-demo.1")
  check "grep -q -- '$flag' <<<\"\$man\"" "$flag is missing from debian/speechclient-demo.1"
done
"$demo" >/dev/null 2>&1; check "[ $? = 2 ]" "no source exits 2"
"$demo" --file a.wav --mic >/dev/null 2>&1; check "[ $? = 2 ]" "two sources exit 2"
"$demo" --file >/dev/null 2>&1; check "[ $? = 2 ]" "--file without a value exits 2"
"$demo" --url ftp://x --file a.wav >/dev/null 2>&1; check "[ $? = 2 ]" "a bad URL exits 2"
# Table: arguments that are usage errors (exit 2).
while IFS= read -r args; do
  eval "\"\$demo\" $args" >/dev/null 2>&1; rc=$?
  check "[ $rc = 2 ]" "usage error exits 2 (got $rc): $args"
done <<'ARGS'
--chunk-ms 5 --file a.wav
--chunk-ms 1001 --file a.wav
--chunk-ms abc --file a.wav
--chunk-ms "" --file a.wav
--timeout-ms 10x --file a.wav
--timeout-ms -5 --file a.wav
--app-id "has space" --file a.wav
--url "" --file a.wav
--url grpc://host/path --file a.wav
--file a.wav --file b.wav
--mic --mic
--mic hw:0 --file a.wav
--url
--app-id
--language x --file a.wav
ARGS
err=$("$demo" --url grpc://127.0.0.1:1 --file /nonexistent/x.wav 2>&1 >/dev/null); rc=$?
check "[ $rc = 1 ]" "a missing WAV file exits 1"
check "echo \"\$err\" | grep -q /nonexistent/x.wav" "the message names the missing file"

# --list-devices (0.8): ALSA's capture devices, "null" always among them; as JSON lines too.
out=$("$demo" --list-devices 2>&1); rc=$?
check "[ $rc = 0 ]" "--list-devices exits 0 (got $rc: $out)"
check "echo \"\$out\" | grep -qx null" "--list-devices lists ALSA's null device (got: $out)"
out=$("$demo" --list-devices --json 2>&1)
echo "$out" | python3 -c '
import json, sys
devices = [json.loads(l) for l in sys.stdin if l.strip()]
assert all(d["type"] == "device" for d in devices), devices
assert any(d["name"] == "null" and d["description"] for d in devices), devices
'; check "[ $? = 0 ]" "--list-devices --json gives one device object per line (got: $out)"

# With --json, a failed spc_client_new() is an error line too.
out=$("$demo" --url grpc://127.0.0.1:1 --file /nonexistent/x.wav --json 2>/dev/null); rc=$?
check "[ $rc = 1 ]" "--json with a missing WAV file exits 1"
echo "$out" | python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin if l.strip()]
assert len(lines) == 1 and lines[0]["type"] == "error", lines
assert lines[0]["code"] == "audio error" and lines[0]["status"] == 10, lines
assert "/nonexistent/x.wav" in lines[0]["message"], lines
'; check "[ $? = 0 ]" "--json with a missing WAV file prints one error line naming it (got: $out)"

wav=$(mktemp --suffix=.wav)
python3 - "$wav" <<'PY'
import struct, sys, wave
with wave.open(sys.argv[1], "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
    w.writeframes(struct.pack("<1600h", *([0] * 1600)))
PY
cache=$(mktemp -d)
out=$("$demo" --url grpc://127.0.0.1:1 --file "$wav" --json --cache-dir "$cache"); rc=$?
check "[ $rc = 1 ]" "an error run exits 1"
check "[ \"\$(echo \"\$out\" | grep -vc '\"type\":\"state\"')\" = 2 ]" "an error run prints two lines besides its states (got: $out)"
echo "$out" | python3 -c '
import json, sys
every = [json.loads(l) for l in sys.stdin if l.strip()]
states = [l for l in every if l["type"] == "state"]
assert [s["state"] for s in states] == ["connecting", "unavailable"], states
assert "127.0.0.1" in states[1]["message"], states
lines = [l for l in every if l["type"] != "state"]
assert [l["type"] for l in lines] == ["error", "stop"], lines
assert lines[0]["code"] == "network error" and lines[0]["status"] == 4 and lines[0]["grpc_status"] == 14, lines
assert "127.0.0.1" in lines[0]["message"] and lines[1]["context_id"] == "", lines
'; check "[ $? = 0 ]" "the error run's JSON lines"
# The same run without --json: nothing on stdout, the error on stderr, exit 1.
err=$("$demo" --url grpc://127.0.0.1:1 --file "$wav" --cache-dir "$cache" 2>&1 >"$cache/stdout"); rc=$?
check "[ $rc = 1 ]" "an error run without --json exits 1"
check "[ ! -s \"$cache/stdout\" ]" "an error run without --json prints nothing on stdout"
check "echo \"\$err\" | grep -q 'network error: .*127.0.0.1'" "an error run without --json names the error (got: $err)"
rm -f "$wav"

# Microphone mode (ALSA's "null" device gives silence). Against a closed port the context ends by
# itself with an error, and the demo exits 1 without waiting for a signal.
out=$(timeout 30 "$demo" --url grpc://127.0.0.1:1 --mic null --json --cache-dir "$cache" 2>/dev/null); rc=$?
check "[ $rc = 1 ]" "--mic against a closed port exits 1 (got $rc)"
echo "$out" | python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin if l.strip()]
assert [l["type"] for l in lines if l["type"] != "state"] == ["error", "stop"], lines
'; check "[ $? = 0 ]" "--mic against a closed port: error and stop lines (got: $out)"

# Signals: against a server that accepts and never answers, the context stays STARTING until a
# signal. SIGTERM stops it and the demo waits --timeout-ms for the last results (none come: exit
# 1); with SIGINT twice, the second cuts that wait short (exit 1). Both run at once. The exit can
# lag by up to the library's login deadline (about 10 s): spc_client_free() waits for the login
# request in flight. Driven from Python so that SIGINT is not ignored as in a background job.
python3 - "$demo" "$cache" <<'PY'; check "[ $? = 0 ]" "--mic stops on SIGTERM; a second SIGINT cuts the wait short"
import json, signal, socket, subprocess, sys, time
demo, cache = sys.argv[1], sys.argv[2]
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(16)
url = "grpc://127.0.0.1:%d" % srv.getsockname()[1]
cases = [([signal.SIGTERM], 1000, "waiting for the last results"),
         ([signal.SIGINT, signal.SIGINT], 60000, "interrupted again")]
procs = [subprocess.Popen([demo, "--url", url, "--mic", "null", "--json", "--cache-dir", cache,
                           "--timeout-ms", str(t)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
         for _, t, _ in cases]
time.sleep(1.0)
ok = True
for p, (sigs, _, _) in zip(procs, cases):
    if p.poll() is not None:
        print("test_demo.sh: the demo ended before the signal:", p.returncode); ok = False
procs[0].send_signal(signal.SIGTERM)
procs[1].send_signal(signal.SIGINT)
time.sleep(0.5)
procs[1].send_signal(signal.SIGINT)
for p, (sigs, _, expect) in zip(procs, cases):
    try:
        out, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill(); p.communicate()
        print("test_demo.sh: no exit within 20 s after", sigs); ok = False; continue
    if p.returncode != 1 or expect not in err.decode():
        print("test_demo.sh: after %s: exit %d, stderr %r" % (sigs, p.returncode, err.decode())); ok = False
    for line in out.decode().splitlines():
        json.loads(line)
sys.exit(0 if ok else 1)
PY
rm -rf "$cache"

[ "$fail" = 0 ] && echo "test_demo.sh: ok"
exit $fail
