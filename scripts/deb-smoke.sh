#!/usr/bin/env bash
# The .debs on a clean Debian 12 without Swift (issue 7). Slow (about 3 minutes), not part of
# `make test`; run as root:
#
#   scripts/deb-smoke.sh [--debs DIR | --head] [--keep] [--mirror URL]
#
# 1. builds the .debs with dpkg-buildpackage from a copy of the working tree (git's tracked and
#    untracked-but-not-ignored files; --head: the last commit instead), unless --debs DIR gives
#    already built ones;
# 2. makes a clean bookworm root with `debootstrap --variant=minbase` from the Debian mirror in
#    /etc/apt/sources.list(.d) (or --mirror / $DEB_SMOKE_MIRROR);
# 3. installs the .debs there with apt, dependencies from Debian, plus gcc and pkg-config;
# 4. starts the reference server OUTSIDE the root on loopback (.venv/bin/python -m
#    speechclient_server), synthesizes a WAV with espeak-ng + sox, and inside the root, where no
#    Swift exists: builds a C program with `pkg-config --cflags --libs speechclient` that
#    transcribes the file, runs speechclient-demo, and transcribes with the Python binding
#    (library found by its SONAME) and its speechclient command;
# 5. stops the server, unmounts and removes the work folder (--keep leaves it for inspection).
#
# Needs: debootstrap, dpkg-dev, debhelper and the Build-Depends of debian/control (for the
# build), espeak-ng, sox, the repository's .venv with the reference server: all installed by
# SPC_SETUP_PACKAGING=1 scripts/setup-debian.sh. Network: only the Debian mirror.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

debs="" keep=0 head=0 mirror=${DEB_SMOKE_MIRROR:-}
while [ $# -gt 0 ]; do
    case $1 in
        --debs) debs=$(cd "$2" && pwd); shift 2 ;;
        --keep) keep=1; shift ;;
        --head) head=1; shift ;;
        --mirror) mirror=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "deb-smoke: unknown argument $1" >&2; exit 2 ;;
    esac
done
me=deb-smoke
. scripts/lib/bookworm-root.sh
smoke_preconditions

t0=$(date +%s)
step() { echo "deb-smoke: [$(( $(date +%s) - t0 ))s] $*"; }

work=$(mktemp -d /tmp/spc-deb-smoke.XXXXXX)
root=$work/root
server_pid=""
cleanup() {
    local rc=$?
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2> /dev/null; then
        kill "$server_pid" 2> /dev/null || true
        wait "$server_pid" 2> /dev/null || true
    fi
    for m in "$root/proc" "$root/dev/pts"; do
        if mountpoint -q "$m" 2> /dev/null; then umount "$m" || umount -l "$m" || true; fi
    done
    if [ "$keep" = 1 ] || { [ "$rc" != 0 ] && [ -n "${DEB_SMOKE_KEEP_ON_FAILURE:-}" ]; }; then
        echo "deb-smoke: work folder kept: $work"
    else
        rm -rf --one-file-system "$work"
    fi
    # SwiftPM's lock files for the build folder, named after its path.
    rm -f "${TMPDIR:-/tmp}/$(printf %s "$work" | tr / _)"_*.lock
    return $rc
}
trap cleanup EXIT

# --- 1. the .debs --------------------------------------------------------------------------------
if [ -z "$debs" ]; then
    step "building the .debs in $work/build"
    mkdir -p "$work/build/src"
    if [ "$head" = 1 ]; then
        git archive HEAD | tar -C "$work/build/src" -xf -
    else
        git ls-files -z --cached --others --exclude-standard | xargs -0 -r sh -c '
            for f; do [ -e "$f" ] || [ -L "$f" ] && printf "%s\0" "$f"; done' sh \
            | tar --null -T - -cf - | tar -C "$work/build/src" -xf -
    fi
    swift_bin=${SWIFT:-$(command -v swift || echo /opt/swift/usr/bin/swift)}
    # A plain PATH, so that the build uses Debian's python3 (not a pyenv or venv one); the
    # Swift toolchain is passed explicitly. The build lock is shared with the other builds.
    if ! (cd "$work/build/src" && flock /tmp/spc-build.lock env PATH=/usr/sbin:/usr/bin:/sbin:/bin \
            SWIFT="$swift_bin" dpkg-buildpackage -us -uc -b > "$work/build/build.log" 2>&1); then
        tail -40 "$work/build/build.log"; echo "deb-smoke: FAIL: dpkg-buildpackage" >&2; exit 1
    fi
    debs=$work/build
fi
ls "$debs"/*.deb > /dev/null 2>&1 || { echo "deb-smoke: no .deb in $debs" >&2; exit 1; }
for d in "$debs"/*.deb; do step "  $(basename "$d") $(stat -c %s "$d") bytes"; done

# --- 2. a clean Debian 12 root -------------------------------------------------------------------
if [ -z "$mirror" ]; then
    mirror=$(bookworm_mirror)
fi
step "debootstrap --variant=minbase bookworm from ${mirror:-?}"
make_bookworm_root "$mirror"

# --- 3. install the .debs with apt ---------------------------------------------------------------
mkdir -p "$root/tmp/debs"
cp "$debs"/*.deb "$root/tmp/debs/"
step "apt-get install the .debs (+ gcc, libc6-dev, pkg-config) in the root"
if ! in_root sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends /tmp/debs/*.deb gcc libc6-dev pkg-config' > "$work/apt.log" 2>&1; then
    tail -30 "$work/apt.log"; echo "deb-smoke: FAIL: apt-get install" >&2; exit 1
fi
in_root dpkg-query -W -f '${Package} ${Version} ${Architecture}\n' libspeechclient0 libspeechclient-dev \
    python3-speechclient speechclient-tools | sed 's/^/deb-smoke:   installed /'
step "root: $(in_root dpkg-query -W -f '.\n' | wc -l) packages, $(du -sh --one-file-system "$root" | cut -f1)"

fails=0
fail() { echo "deb-smoke: FAIL: $*"; fails=$((fails + 1)); }
# No Swift in the root: no toolchain, no Swift runtime library anywhere.
if in_root sh -c 'command -v swift || command -v swiftc || ls -d /opt/swift 2>/dev/null' | grep -q .; then
    fail "a Swift toolchain is visible in the root"
fi
swiftlibs=$(find "$root" -xdev -name 'libswift*' 2> /dev/null | head -3)
if [ -z "$swiftlibs" ]; then step "no Swift toolchain or runtime in the root"; else fail "Swift runtime libraries in the root: $swiftlibs"; fi

# --- 4. the server outside, speech, and the three clients inside ---------------------------------
phrase="turn on the kitchen lights"
step "synthesizing \"$phrase\" with espeak-ng + sox"
espeak-ng -v en-us -s 160 -w "$work/raw.wav" "$phrase"
sox -R "$work/raw.wav" -r 16000 -c 1 -b 16 -e signed-integer "$root/tmp/speech.wav"

mkfifo "$work/server.out"
.venv/bin/python -m speechclient_server --host 127.0.0.1 --port 0 > "$work/server.out" 2> "$work/server.err" &
server_pid=$!
exec 3< "$work/server.out"
line=""
if ! read -r -t 60 line <&3 || [ "${line#listening on }" = "$line" ]; then
    cat "$work/server.err"; echo "deb-smoke: FAIL: the reference server did not start: $line" >&2; exit 1
fi
# Keep draining the server's stdout so it never blocks on a full pipe.
cat <&3 > "$work/server.log" &
exec 3<&-
address=${line#listening on }
url=grpc://$address
step "reference server (pid $server_pid) listening on $address"

cat > "$root/tmp/transcribe.c" <<'C'
/* Built inside the root with pkg-config: transcribes argv[2] on server argv[1]. */
#include <speechclient.h>
#include <stdio.h>
#include <string.h>

static int finals;
static void on_segment(spc_client *c, const spc_segment *s, void *ud) {
    (void)c; (void)ud;
    if (spc_segment_is_final(s)) { printf("final: %s\n", spc_segment_transcript(s)); finals++; }
}
static void on_error(spc_client *c, const spc_error *e, void *ud) {
    (void)c; (void)ud;
    fprintf(stderr, "error: %s: %s\n", spc_status_str(spc_error_code(e)), spc_error_message(e));
}
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    printf("libspeechclient %s (%ld), header %s\n", spc_version(), (long)spc_version_number(), SPC_VERSION_STRING);
    if (spc_version_number() != SPC_VERSION_NUMBER) return 1;
    spc_options *o = spc_options_new();
    spc_options_set_server_url(o, argv[1]);
    spc_options_set_app_id(o, "deb-smoke");
    spc_options_set_audio_file(o, argv[2]);
    spc_options_set_segment_cb(o, on_segment, NULL);
    spc_options_set_error_cb(o, on_error, NULL);
    spc_client *c = NULL;
    spc_error *err = NULL;
    if (spc_client_new(o, &c, &err) != SPC_OK) {
        fprintf(stderr, "%s\n", spc_error_message(err));
        spc_error_free(err);
        spc_options_free(o);
        return 1;
    }
    spc_options_free(o);
    spc_status st = spc_client_start(c);
    if (st == SPC_OK) st = spc_client_wait_idle(c, 60000);
    spc_client_free(c);
    return st == SPC_OK && finals > 0 ? 0 : 1;
}
C

check_heard() {  # NAME OUTPUT: the output holds the phrase's content words
    local name=$1 out=$2
    if printf '%s' "$out" | grep -qi 'kitchen' && printf '%s' "$out" | grep -qi 'lights'; then
        step "$name: ok"
    else
        fail "$name did not hear \"$phrase\""
    fi
}

step "C program built with pkg-config inside the root"
flags=$(in_root pkg-config --cflags --libs speechclient)
echo "deb-smoke:   pkg-config --cflags --libs speechclient: $flags"
if out=$(in_root sh -c "cc -std=c11 -Wall -Wextra -Werror -pedantic /tmp/transcribe.c \$(pkg-config --cflags --libs speechclient) -o /tmp/transcribe && ldd /tmp/transcribe | grep speechclient && timeout 120 /tmp/transcribe '$url' /tmp/speech.wav" 2>&1); then
    printf '%s\n' "$out" | sed 's/^/deb-smoke:   /'
    check_heard "C program" "$out"
else
    printf '%s\n' "$out" | sed 's/^/deb-smoke:   /'; fail "C program (exit status $?)"
fi

step "speechclient-demo --json"
if out=$(in_root timeout 120 speechclient-demo --url "$url" --file /tmp/speech.wav --json 2>&1); then
    # Only the final segments (their "final" comes right before "transcript").
    printf '%s\n' "$out" | grep '"final":true,"transcript"' | sed 's/^/deb-smoke:   /' || true
    check_heard "speechclient-demo" "$(printf '%s\n' "$out" | grep '"final":true,"transcript"' || true)"
else
    printf '%s\n' "$out" | tail -5 | sed 's/^/deb-smoke:   /'; fail "speechclient-demo"
fi

step "Python binding (library by SONAME, no SPEECHCLIENT_LIBRARY)"
cat > "$root/tmp/transcribe.py" <<'PY'
import sys
import speechclient
from speechclient import _native

print("binding", speechclient.__file__, "library", _native.LIBRARY_PATH, _native.LOADED_VERSION)
finals = []
with speechclient.Client(url=sys.argv[1], app_id="deb-smoke-python",
                         audio=speechclient.WavFile(sys.argv[2])) as client:
    client.start()
    for update in client.updates(timeout=60):
        if isinstance(update, speechclient.Segment) and update.final:
            print("final:", update.transcript)
            finals.append(update.transcript)
sys.exit(0 if finals else 1)
PY
if out=$(in_root timeout 120 python3 /tmp/transcribe.py "$url" /tmp/speech.wav 2>&1); then
    printf '%s\n' "$out" | sed 's/^/deb-smoke:   /'
    check_heard "Python binding" "$out"
else
    printf '%s\n' "$out" | tail -8 | sed 's/^/deb-smoke:   /'; fail "Python binding"
fi

step "speechclient (the binding's command)"
if out=$(in_root timeout 120 speechclient --url "$url" --file /tmp/speech.wav 2>&1); then
    printf '%s\n' "$out" | tail -2 | sed 's/^/deb-smoke:   /'
    check_heard "speechclient command" "$out"
else
    printf '%s\n' "$out" | tail -5 | sed 's/^/deb-smoke:   /'; fail "speechclient command"
fi

# --- 5. done -------------------------------------------------------------------------------------
kill "$server_pid" 2> /dev/null || true
wait "$server_pid" 2> /dev/null || true
server_pid=""
step "server stopped"
if [ "$fails" -gt 0 ]; then echo "deb-smoke: $fails check(s) FAILED"; exit 1; fi
step "ok"
