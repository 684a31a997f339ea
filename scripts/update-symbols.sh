#!/usr/bin/env bash
# Keeps debian/libspeechclient0.symbols equal to what the library exports.
#   scripts/update-symbols.sh [--check] [LIB]      (LIB defaults to build/libspeechclient.so.VERSION)
# A symbol already listed keeps the version it first appeared in; a new export is added with the
# header's SPC_VERSION_STRING. A listed symbol the library no longer exports is an error either
# way: removing a shipped function breaks the ABI and needs a new SONAME (docs/ABI.md).
# --check writes nothing and fails when the file is not what this script would write.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
version=$(sed -n 's/^#define SPC_VERSION_STRING "\(.*\)"$/\1/p' "$top/include/speechclient.h")
lib=${1:-$top/build/libspeechclient.so.$version}
symbols=$top/debian/libspeechclient0.symbols
[ -f "$lib" ] || { echo "update-symbols: no library at $lib (run make first)" >&2; exit 1; }

new=$(mktemp)
trap 'rm -f "$new"' EXIT
# Exports as dpkg-gensymbols names them: NAME@VERSIONNODE, the version node itself included.
nm -D --defined-only "$lib" | awk '$2 ~ /^[A-Z]$/ { s = $3; sub(/@@/, "@", s); if ($2 == "A" && s !~ /@/) s = s "@" s; print s }' | sort -u |
awk -v version="$version" -v symbols="$symbols" '
  BEGIN {
    while ((getline line < symbols) > 0)
      if (line ~ /^ /) { split(substr(line, 2), f, " "); known[f[1]] = f[2] }
    print "libspeechclient.so.0 libspeechclient0 #MINVER#"
    print "* Build-Depends-Package: libspeechclient-dev"
  }
  { seen[$1] = 1; print " " $1 " " (($1 in known) ? known[$1] : version) }
  END {
    for (s in known) if (!(s in seen)) { print "update-symbols: " s " is listed but no longer exported" > "/dev/stderr"; bad = 1 }
    exit bad
  }' > "$new" || { echo "update-symbols: removing a symbol needs a SONAME bump (docs/ABI.md)" >&2; exit 1; }

if [ "$check" = 1 ]; then
  if ! diff -u "$symbols" "$new"; then
    echo "update-symbols: debian/libspeechclient0.symbols is out of date: run scripts/update-symbols.sh" >&2
    exit 1
  fi
  echo "update-symbols: $(grep -c '^ ' "$symbols") symbols listed, as exported"
else
  cp "$new" "$symbols"
  echo "update-symbols: wrote $symbols ($(grep -c '^ ' "$symbols") symbols)"
fi
