#!/usr/bin/env bash
# ABI check: the functions the header declares are exactly the functions the .so exports (each a
# versioned function), the version macros agree with each other and with the library, and the
# .so has SONAME libspeechclient.so.0, no RPATH/RUNPATH and no Swift runtime in NEEDED.
# Usage: Tests/c/abi-check.sh build/libspeechclient.so.0.2.0
set -euo pipefail
lib=${1:?usage: abi-check.sh LIB}
top=$(cd "$(dirname "$0")/../.." && pwd)
header=$top/include/speechclient.h
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Declarations: comments and preprocessor lines removed, the text cut into statements at ';'
# (so a declaration may span lines); each statement that starts with SPC_API declares the
# function named before its first '('. A statement that declares an spc_ function without
# SPC_API is an error of its own (it would not be exported).
perl -0777 -ne '
  s{/\*.*?\*/}{ }gs; s{//[^\n]*}{}g; s{^[ \t]*#[^\n]*(\\\n[^\n]*)*}{}mg;
  for my $st (split /;/) {
    $st =~ s/^.*[{}]//s; $st =~ s/\s+/ /g; $st =~ s/^ //;
    next if $st =~ /^typedef / || $st !~ /\(/;
    my ($name) = $st =~ /\b(spc_\w+)\s*\(/ or next;
    if ($st =~ /^SPC_API /) { print "$name\n" } else { print STDERR "NOAPI $name\n" }
  }' "$header" 2> "$tmp/noapi" | sort -u > "$tmp/header"
# Exports: global, defined, dynamic symbols (upper-case nm types), minus the version node.
nm -D --defined-only "$lib" | awk '$2 ~ /^[A-Z]$/ {print $3}' | sed 's/@.*//' \
  | grep -vE '^SPEECHCLIENT_0(\.[0-9]+)?$' | sort -u > "$tmp/exports"

status=0
if ! diff -u "$tmp/header" "$tmp/exports" > "$tmp/diff"; then
  echo "abi-check: the header and the library's exports differ (- header only, + library only):"
  grep -E '^[-+]spc|^[-+][A-Za-z_]' "$tmp/diff" || cat "$tmp/diff"
  status=1
fi
echo "abi-check: $(wc -l < "$tmp/header") functions declared, $(wc -l < "$tmp/exports") exported"
if [ ! -s "$tmp/header" ]; then echo "abi-check: no SPC_API declaration found in $header"; status=1; fi
if [ -s "$tmp/noapi" ]; then
  echo "abi-check: declared without SPC_API (not exported): $(sed 's/^NOAPI //' "$tmp/noapi" | tr '\n' ' ')"
  status=1
fi
# Every export is a function (nm type T), versioned with a node of this SONAME: SPEECHCLIENT_0
# for 0.1, SPEECHCLIENT_0.N for the functions minor release N added (docs/ABI.md).
nm -D --defined-only "$lib" | awk '$3 ~ /^spc_/ && ($2 != "T" || $3 !~ /@@?SPEECHCLIENT_0(\.[0-9]+)?$/) {print "abi-check: not a versioned function: " $2 " " $3; bad=1} END {exit bad}' || status=1
# A function the header says arrived "Since 0.N" is in node SPEECHCLIENT_0.N; the others in SPEECHCLIENT_0.
perl -0777 -ne '
  while (m{/\*((?:(?!\*/).)*?)\*/\s*((?:SPC_API[^;]*;\s*)+)}gs) {
    my ($doc, $decls) = ($1, $2);
    my ($since) = $doc =~ /Since 0\.(\d+)/;
    while ($decls =~ /\b(spc_\w+)\s*\(/g) { print "$1 ", (defined $since ? "SPEECHCLIENT_0.$since" : "SPEECHCLIENT_0"), "\n" }
  }' "$header" | sort -u > "$tmp/nodes-header"
nm -D --defined-only "$lib" | awk '$3 ~ /^spc_/ { split($3, p, /@@?/); print p[1], p[2] }' | sort -u > "$tmp/nodes-lib"
if ! diff -u "$tmp/nodes-header" "$tmp/nodes-lib" > "$tmp/nodes-diff"; then
  echo "abi-check: version nodes differ from the header's 'Since' notes (- header, + library):"
  grep -E '^[-+]spc' "$tmp/nodes-diff"
  status=1
fi

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
# Linked through a private libspeechclient.so.0 link, so LIB may live anywhere.
mkdir "$tmp/lib"
ln -s "$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")" "$tmp/lib/libspeechclient.so.0"
ln -s libspeechclient.so.0 "$tmp/lib/libspeechclient.so"
cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$top/include" "$tmp/v.c" -L"$tmp/lib" -lspeechclient -o "$tmp/v"
if ! LD_LIBRARY_PATH="$tmp/lib" "$tmp/v"; then echo "abi-check: spc_version_number() does not match SPC_VERSION_NUMBER"; status=1; fi

# Captured once: `readelf | grep -q` under pipefail fails (or, in an `if`, passes) when grep
# exits before readelf finished writing.
dynamic=$(readelf -d "$lib")
grep -q 'SONAME.*\[libspeechclient.so.0\]' <<< "$dynamic" || { echo "abi-check: SONAME is not libspeechclient.so.0"; status=1; }
if grep -qE 'RPATH|RUNPATH' <<< "$dynamic"; then echo "abi-check: the library has an RPATH/RUNPATH"; status=1; fi
if grep -qi 'NEEDED.*swift' <<< "$dynamic"; then echo "abi-check: a Swift runtime library is NEEDED"; status=1; fi
[ "$status" = 0 ] && echo "abi-check: ok"
exit $status
