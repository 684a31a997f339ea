#!/usr/bin/env bash
# ABI check: the functions the header declares are exactly the functions the .so exports, and
# the version macros agree with each other and with the library.
# Usage: Tests/c/abi-check.sh build/libspeechclient.so.0.1.0
set -euo pipefail
lib=${1:?usage: abi-check.sh LIB}
top=$(cd "$(dirname "$0")/../.." && pwd)
header=$top/include/speechclient.h
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Declarations: every "SPC_API ... name(" (they may span lines; join them first).
tr '\n' ' ' < "$header" | grep -oE 'SPC_API[^;]*\(' | grep -oE 'spc_[a-z0-9_]+ *\($' \
  | tr -d ' (' | sort -u > "$tmp/header"
# Exports: global, defined, dynamic symbols, minus the version node.
nm -D --defined-only "$lib" | awk '$2 ~ /^[A-Z]$/ {print $3}' | sed 's/@.*//' \
  | grep -v '^SPEECHCLIENT_0$' | sort -u > "$tmp/exports"

status=0
if ! diff -u "$tmp/header" "$tmp/exports" > "$tmp/diff"; then
  echo "abi-check: the header and the library's exports differ (- header only, + library only):"
  grep -E '^[-+]spc|^[-+][A-Za-z_]' "$tmp/diff" || cat "$tmp/diff"
  status=1
fi
echo "abi-check: $(wc -l < "$tmp/header") functions declared, $(wc -l < "$tmp/exports") exported"

major=$(sed -n 's/^#define SPC_VERSION_MAJOR \([0-9]*\)$/\1/p' "$header")
minor=$(sed -n 's/^#define SPC_VERSION_MINOR \([0-9]*\)$/\1/p' "$header")
patch=$(sed -n 's/^#define SPC_VERSION_PATCH \([0-9]*\)$/\1/p' "$header")
number=$(sed -n 's/^#define SPC_VERSION_NUMBER \([0-9]*\)$/\1/p' "$header")
string=$(sed -n 's/^#define SPC_VERSION_STRING "\(.*\)"$/\1/p' "$header")
if [ "$number" != "$((major * 1000000 + minor * 1000 + patch))" ] || [ "$string" != "$major.$minor.$patch" ]; then
  echo "abi-check: version macros disagree: $major.$minor.$patch, number $number, string $string"
  status=1
fi
case "$(basename "$lib")" in
  "libspeechclient.so.$string") ;;
  *) echo "abi-check: the library file $(basename "$lib") does not carry version $string"; status=1 ;;
esac

# The loaded library reports the header's version.
cat > "$tmp/v.c" <<'C'
#include <speechclient.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    if (spc_version_number() != SPC_VERSION_NUMBER || strcmp(spc_version(), SPC_VERSION_STRING) != 0) {
        printf("library %s (%d), header %s (%d)\n", spc_version(), (int)spc_version_number(),
               SPC_VERSION_STRING, SPC_VERSION_NUMBER);
        return 1;
    }
    return 0;
}
C
cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$top/include" "$tmp/v.c" "$lib" -o "$tmp/v"
if ! LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/v"; then echo "abi-check: spc_version_number() does not match SPC_VERSION_NUMBER"; status=1; fi

readelf -d "$lib" | grep -q 'SONAME.*\[libspeechclient.so.0\]' || { echo "abi-check: SONAME is not libspeechclient.so.0"; status=1; }
if readelf -d "$lib" | grep -qE 'RPATH|RUNPATH'; then echo "abi-check: the library has an RPATH/RUNPATH"; status=1; fi
if readelf -d "$lib" | grep NEEDED | grep -qi swift; then echo "abi-check: a Swift runtime library is NEEDED"; status=1; fi
[ "$status" = 0 ] && echo "abi-check: ok"
exit $status
