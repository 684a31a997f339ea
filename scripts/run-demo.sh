#!/usr/bin/env bash
# The main job, end to end on one machine: build the library and the demo, start the bundled
# reference server on loopback, synthesize a spoken sentence, transcribe it through the library.
# Run scripts/setup-debian.sh first. Usage: scripts/run-demo.sh ["sentence to speak"]
set -euo pipefail
cd "$(dirname "$0")/.."
TEXT=${1:-"turn on the kitchen lights"}
PY=.venv/bin/python
[ -x "$PY" ] || { echo "run-demo: run scripts/setup-debian.sh first" >&2; exit 1; }

make -s all >/dev/null

work=$(mktemp -d)
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

espeak-ng -v en-us -s 160 -w "$work/speech.wav" "$TEXT"
echo "run-demo: spoken text: \"$TEXT\""

"$PY" -m speechclient_server --host 127.0.0.1 --port 0 >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
for _ in $(seq 1 300); do
  grep -q '^listening on ' "$work/server.out" 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.err" >&2; exit 1; }
  sleep 0.1
done
addr=$(sed -n 's/^listening on //p' "$work/server.out" | head -1)
[ -n "$addr" ] || { echo "run-demo: the server did not start" >&2; cat "$work/server.err" >&2; exit 1; }
echo "run-demo: reference server on $addr"

echo "run-demo: the C demo (build/speechclient-demo):"
build/speechclient-demo --url "grpc://$addr" --app-id demo --file "$work/speech.wav" --cache-dir "$work/cache"
echo "run-demo: the Python binding (python -m speechclient transcribe):"
SPEECHCLIENT_LIBRARY="$PWD/build/libspeechclient.so.0" \
  "$PY" -m speechclient transcribe "$work/speech.wav" --url "grpc://$addr" --cache-dir "$work/cache"
