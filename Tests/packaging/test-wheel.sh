#!/usr/bin/env bash
# The wheel on its own (make test-wheel; issue 22). Builds it (scripts/build-wheel.sh), then:
#  - `auditwheel show` must name a manylinux policy, and the wheel must carry the library;
#  - a fresh venv (no packages) installs it with no libspeechclient on the library path
#    (SPEECHCLIENT_LIBRARY and LD_LIBRARY_PATH unset; a system copy would be found by the
#    check below and fail the test): `speechclient --version` names the wheel's own copy;
#  - the wheel's `speechclient` CLI transcribes synthesized speech against the reference server
#    (the repository's .venv runs it), from a file and from standard input;
#  - the reference server's own wheel installs into another fresh venv with its dependencies from
#    PyPI and serves: the two commands of the README's wheel section, without the repository.
# Prints the figures: wheel size, install time, time from `import speechclient` to the first
# result.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
PYTHON=${PYTHON:-.venv/bin/python}
version=$(sed -n 's/^#define SPC_VERSION_STRING "\(.*\)"$/\1/p' include/speechclient.h)
tmp=$(mktemp -d)
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2> /dev/null && wait "$server_pid" 2> /dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test-wheel: FAIL: $*"; exit 1; }
now() { date +%s.%N; }
seconds() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { printf f, b - a }'; }

scripts/build-wheel.sh "$tmp/dist" | sed 's/^/test-wheel: /'
wheel=$(ls "$tmp"/dist/speechclient-"$version"-py3-none-manylinux_*_"$(uname -m)".whl) || fail "no manylinux wheel"
server_wheel=$(ls "$tmp"/dist/speechclient_server-*-py3-none-any.whl) || fail "no server wheel"
build/wheel-tools/bin/auditwheel show "$wheel" | tr '\n' ' ' | tr -s ' ' > "$tmp/show.txt"
grep -q 'is consistent with the following platform tag: "manylinux_' "$tmp/show.txt" || { cat "$tmp/show.txt"; fail "auditwheel names no manylinux policy"; }
/usr/bin/python3 -m zipfile -l "$wheel" > "$tmp/files.txt"
grep -q "^speechclient/_lib/libspeechclient.so.0 " "$tmp/files.txt" || fail "the wheel does not carry the library"
if grep -q "libasound" "$tmp/files.txt"; then fail "ALSA was copied into the wheel"; fi
if grep -q -E "lib(ssl|crypto)" "$tmp/files.txt"; then fail "OpenSSL was copied into the wheel (the system's is opened for TLS)"; fi

# No libspeechclient anywhere the loader looks, besides the wheel's.
unset SPEECHCLIENT_LIBRARY LD_LIBRARY_PATH
if /sbin/ldconfig -p | grep -q libspeechclient; then fail "a libspeechclient is installed on this system: the test would not prove the wheel's copy is used"; fi

/usr/bin/python3 -m venv "$tmp/venv"
t0=$(now)
"$tmp/venv/bin/pip" install -q --no-index --disable-pip-version-check "$wheel"
t1=$(now)
versions=$(cd "$tmp" && "$tmp/venv/bin/speechclient" --version)
echo "test-wheel: $versions"
case $versions in
    "speechclient $version (Python binding), libspeechclient $version ($tmp/venv/lib/"*"/site-packages/speechclient/_lib/libspeechclient.so.0)") ;;
    *) fail "--version does not name the wheel's library: $versions" ;;
esac

# The reference server from the repository's venv (the wheel's server is checked below).
"$PYTHON" -m speechclient_server --host 127.0.0.1 --port 0 > "$tmp/server.out" 2> "$tmp/server.err" &
server_pid=$!
for _ in $(seq 1 300); do grep -q '^listening on ' "$tmp/server.out" 2> /dev/null && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$tmp/server.out" | head -1)
[ -n "$addr" ] || { cat "$tmp/server.err"; fail "the reference server did not start"; }
espeak-ng -v en-us -s 160 -w "$tmp/espeak.wav" "turn on the kitchen lights"
sox -R "$tmp/espeak.wav" -r 16000 -c 1 -b 16 -e signed-integer "$tmp/speech.wav"
expected="turn on the kitchen lights  [intent: turn_on]  [room: kitchen]"
got=$(cd "$tmp" && "$tmp/venv/bin/speechclient" --url "grpc://$addr" --file "$tmp/speech.wav" --cache-dir "$tmp/cache" | tail -1)
[ "$got" = "$expected" ] || fail "the wheel's CLI on a file printed: $got"
got=$(cd "$tmp" && "$tmp/venv/bin/speechclient" --url "grpc://$addr" --file - --cache-dir "$tmp/cache" < "$tmp/speech.wav" | tail -1)
[ "$got" = "$expected" ] || fail "the wheel's CLI on standard input printed: $got"
first=$(cd "$tmp" && "$tmp/venv/bin/python" - "$addr" "$tmp/speech.wav" "$tmp/cache" <<'PY'
import sys, time
t0 = time.monotonic()
import speechclient as sc
with sc.Client(url="grpc://" + sys.argv[1], app_id="wheel", audio=sc.WavFile(sys.argv[2]), cache_dir=sys.argv[3]) as c:
    c.start()
    for u in c.updates(timeout=30):
        if isinstance(u, sc.Segment):
            print(f"{(time.monotonic() - t0) * 1000:.0f}")
            break
PY
)
echo "test-wheel: wheel $(stat -c %s "$wheel") bytes; install into a fresh venv $(seconds "$t0" "$t1" %.1f) s; import to first result ${first} ms"
kill "$server_pid"; wait "$server_pid" 2> /dev/null || true; server_pid=""

# The server's wheel in its own venv, dependencies from PyPI: pip install, then serve.
/usr/bin/python3 -m venv "$tmp/server-venv"
t0=$(now)
"$tmp/server-venv/bin/pip" install -q --disable-pip-version-check "$server_wheel" || fail "pip install of the server's wheel"
t1=$(now)
(cd "$tmp" && exec "$tmp/server-venv/bin/speechclient-server" --host 127.0.0.1 --port 0 > "$tmp/server2.out" 2> "$tmp/server2.err") &
server_pid=$!
for _ in $(seq 1 300); do grep -q '^listening on ' "$tmp/server2.out" 2> /dev/null && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$tmp/server2.out" | head -1)
[ -n "$addr" ] || { cat "$tmp/server2.err"; fail "the server's wheel did not serve"; }
got=$(cd "$tmp" && "$tmp/venv/bin/speechclient" --url "grpc://$addr" --file "$tmp/speech.wav" --cache-dir "$tmp/cache2" | tail -1)
[ "$got" = "$expected" ] || fail "against the server's wheel the CLI printed: $got"
echo "test-wheel: the server's wheel installed in $(seconds "$t0" "$t1" %.0f) s (dependencies from PyPI) and served"
echo "test-wheel: ok"
