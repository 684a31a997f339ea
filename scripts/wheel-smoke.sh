#!/usr/bin/env bash
# The wheel on a clean Debian 12 without Swift or any -dev package (issue 22). Slow (a
# debootstrap, about 2 minutes), not part of `make test` (Tests/packaging/test-wheel.sh is the
# quick check); run as root:
#
#   scripts/wheel-smoke.sh [--wheel FILE] [--keep] [--mirror URL]
#
# 1. builds the wheel (scripts/build-wheel.sh) unless --wheel gives one;
# 2. makes a bookworm root with `debootstrap --variant=minbase`, then installs python3-venv only
#    (no libnghttp2, no ALSA, no compiler; libssl3 comes with python3, and the library opens it
#    for TLS only);
# 3. inside it: a venv, `pip install --no-index` of the wheel, `speechclient --version`, and the
#    wheel's CLI transcribing a synthesized WAV and the same WAV on standard input against the
#    reference server started OUTSIDE the root on loopback, and over TLS (a throwaway CA; the
#    root's own OpenSSL 3, which the library opens for TLS: the wheel carries none); a
#    microphone fails naming libasound2.
# Network: only the Debian mirror. Needs debootstrap (SPC_SETUP_PACKAGING=1 scripts/setup-debian.sh).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
wheel="" keep=0 mirror=${DEB_SMOKE_MIRROR:-}
while [ $# -gt 0 ]; do
    case $1 in
        --wheel) wheel=$(realpath "$2"); shift 2 ;;
        --keep) keep=1; shift ;;
        --mirror) mirror=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "wheel-smoke: unknown argument $1" >&2; exit 2 ;;
    esac
done
me=wheel-smoke
. scripts/lib/bookworm-root.sh
smoke_preconditions

t0=$(date +%s)
step() { echo "wheel-smoke: [$(( $(date +%s) - t0 ))s] $*"; }
work=$(mktemp -d /tmp/spc-wheel-smoke.XXXXXX)
root=$work/root
server_pid="" tls_pid=""
cleanup() {
    local rc=$?
    [ -n "$server_pid" ] && kill "$server_pid" 2> /dev/null && wait "$server_pid" 2> /dev/null
    [ -n "$tls_pid" ] && kill "$tls_pid" 2> /dev/null && wait "$tls_pid" 2> /dev/null
    if mountpoint -q "$root/proc" 2> /dev/null; then umount "$root/proc" || umount -l "$root/proc" || true; fi
    if [ "$keep" = 1 ]; then echo "wheel-smoke: work folder kept: $work"; else rm -rf --one-file-system "$work"; fi
    return $rc
}
trap cleanup EXIT

if [ -z "$wheel" ]; then
    step "building the wheel"
    make -s lib > /dev/null
    scripts/build-wheel.sh "$work/dist" | sed 's/^/wheel-smoke:   /'
    wheel=$(ls "$work"/dist/speechclient-*-manylinux_*.whl)
fi

[ -n "$mirror" ] || mirror=$(bookworm_mirror)
step "debootstrap --variant=minbase bookworm from ${mirror:-?}"
make_bookworm_root "$mirror"
in_root sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv' \
    > "$work/apt.log" 2>&1 || { tail -20 "$work/apt.log"; echo "wheel-smoke: FAIL: apt-get install python3-venv" >&2; exit 1; }

fails=0
fail() { echo "wheel-smoke: FAIL: $*"; fails=$((fails + 1)); }
for absent in libnghttp2 libasound libspeechclient libswift; do
    if find "$root/usr/lib" "$root/lib" -xdev -name "$absent*" 2> /dev/null | grep -q .; then fail "$absent is in the root"; fi
done
if in_root sh -c 'command -v gcc || command -v swift || ls -d /usr/include/openssl 2>/dev/null' | grep -q .; then
    fail "a compiler, Swift or a -dev package is in the root"
fi
step "root: $(in_root dpkg-query -W -f '.\n' | wc -l) packages, no libnghttp2, ALSA, compiler or Swift"

cp "$wheel" "$root/tmp/"
in_root python3 -m venv /opt/venv
in_root /opt/venv/bin/pip install -q --no-index --disable-pip-version-check "/tmp/$(basename "$wheel")" \
    || { echo "wheel-smoke: FAIL: pip install of the wheel" >&2; exit 1; }
step "$(in_root /opt/venv/bin/speechclient --version)"

espeak-ng -v en-us -s 160 -w "$work/raw.wav" "turn on the kitchen lights"
sox -R "$work/raw.wav" -r 16000 -c 1 -b 16 -e signed-integer "$root/tmp/speech.wav"
.venv/bin/python -m speechclient_server --host 127.0.0.1 --port 0 > "$work/server.out" 2> "$work/server.err" &
server_pid=$!
for _ in $(seq 1 300); do grep -q '^listening on ' "$work/server.out" 2> /dev/null && break; sleep 0.1; done
url=grpc://$(sed -n 's/^listening on //p' "$work/server.out" | head -1)
[ "$url" != grpc:// ] || { cat "$work/server.err"; echo "wheel-smoke: FAIL: the server did not start" >&2; exit 1; }

expected="turn on the kitchen lights  [intent: turn_on]  [room: kitchen]"
got=$(in_root /opt/venv/bin/speechclient --url "$url" --file /tmp/speech.wav --cache-dir /tmp/cache | tail -1)
[ "$got" = "$expected" ] && step "file: $got" || fail "file: $got"
got=$(in_root sh -c "/opt/venv/bin/speechclient --url $url --file - --cache-dir /tmp/cache < /tmp/speech.wav" | tail -1)
[ "$got" = "$expected" ] && step "standard input: $got" || fail "standard input: $got"

# TLS: a CA and a certificate for 127.0.0.1, a second server with them.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=wheel-smoke CA" -keyout "$work/ca.key" \
    -out "$root/tmp/ca.pem" > /dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$work/server.key" -out "$work/server.csr" > /dev/null 2>&1
echo "subjectAltName=IP:127.0.0.1" > "$work/san.ext"
openssl x509 -req -in "$work/server.csr" -CA "$root/tmp/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
    -out "$work/server.pem" -days 2 -extfile "$work/san.ext" > /dev/null 2>&1
.venv/bin/python -m speechclient_server --host 127.0.0.1 --port 0 --tls-cert "$work/server.pem" \
    --tls-key "$work/server.key" > "$work/tls.out" 2> "$work/tls.err" &
tls_pid=$!
for _ in $(seq 1 300); do grep -q '^listening on ' "$work/tls.out" 2> /dev/null && break; sleep 0.1; done
tls_url=grpc+tls://$(sed -n 's/^listening on //p' "$work/tls.out" | head -1)
[ "$tls_url" != grpc+tls:// ] || { cat "$work/tls.err"; echo "wheel-smoke: FAIL: the TLS server did not start" >&2; exit 1; }
got=$(in_root /opt/venv/bin/speechclient --url "$tls_url" --ca-file /tmp/ca.pem --file /tmp/speech.wav --cache-dir /tmp/cache 2>&1 | tail -1)
[ "$got" = "$expected" ] && step "TLS, the root's OpenSSL: $got" || fail "TLS: $got"

mic=$(in_root /opt/venv/bin/speechclient --url "$url" --mic --cache-dir /tmp/cache 2>&1 || true)
case $mic in *"install the libasound2 package"*) step "microphone without ALSA: named" ;; *) fail "microphone: $mic" ;; esac

[ "$fails" = 0 ] || { echo "wheel-smoke: $fails failure(s)"; exit 1; }
step "ok"
