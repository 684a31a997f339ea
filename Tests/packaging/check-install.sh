#!/usr/bin/env bash
# Cheap packaging checks (make test-packaging; issue 7). Needs a built library in build/ (make lib).
#  - `make install NO_BUILD=1 DESTDIR=<tmp>` for PREFIX=/usr/local and for Debian's layout
#    (PREFIX=/usr, LIBDIR=/usr/lib/<multiarch>): exactly the expected files, the library links,
#    the SONAME, no RUNPATH, the .pc file as pkg-config reads it;
#  - a C program built with `pkg-config --cflags --libs speechclient` against the installed layout:
#    spc_version_number() == SPC_VERSION_NUMBER (and the string and macros agree), and it loaded
#    the installed copy;
#  - the Python binding finds the installed library by its SONAME (no SPEECHCLIENT_LIBRARY);
#  - docs/ABI.md exists and covers the policy; debian/ agrees with the header's version and the
#    SONAME; debian/libspeechclient0.symbols lists exactly the exports.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
header=include/speechclient.h
version=$(sed -n 's/^#define SPC_VERSION_STRING "\(.*\)"$/\1/p' "$header")
major=$(sed -n 's/^#define SPC_VERSION_MAJOR \([0-9]*\)$/\1/p' "$header")
lib=build/libspeechclient.so.$version
[ -f "$lib" ] || { echo "packaging: $lib is missing (make lib)"; exit 1; }
CC=${CC:-cc}
PYTHON=${PYTHON:-python3}
multiarch=$($CC -print-multiarch 2>/dev/null || true)
[ -n "$multiarch" ] || multiarch=$(uname -m)-linux-gnu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "packaging: FAIL: $*"; fails=$((fails + 1)); }

cat > "$tmp/version.c" <<'C'
#include <speechclient.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    int ok = spc_version_number() == SPC_VERSION_NUMBER
        && SPC_VERSION_NUMBER == SPC_VERSION_MAJOR * 1000000 + SPC_VERSION_MINOR * 1000 + SPC_VERSION_PATCH
        && strcmp(spc_version(), SPC_VERSION_STRING) == 0;
    printf("library %s (%ld), header %s (%ld)\n", spc_version(), (long)spc_version_number(),
           SPC_VERSION_STRING, (long)SPC_VERSION_NUMBER);
    return ok ? 0 : 1;
}
C

# check_layout NAME PREFIX LIBDIR
check_layout() {
    local name=$1 prefix=$2 libdir=$3 dest=$tmp/$1
    if ! make -s --no-print-directory install NO_BUILD=1 DESTDIR="$dest" PREFIX="$prefix" LIBDIR="$libdir" \
            > "$tmp/$name.log" 2>&1; then
        cat "$tmp/$name.log"; fail "$name: make install failed"; return
    fi
    # Exactly these files and links, nothing else.
    (cd "$dest" && find . \( -type f -o -type l \) -printf '%y %p\n' | sed 's|^\(.\) \./|\1 /|' | sort) > "$tmp/$name.found"
    sort > "$tmp/$name.expected" <<LIST
f $libdir/libspeechclient.so.$version
l $libdir/libspeechclient.so.$major
l $libdir/libspeechclient.so
f $libdir/pkgconfig/speechclient.pc
f $prefix/include/speechclient.h
f $prefix/bin/speechclient-demo
LIST
    diff -u "$tmp/$name.expected" "$tmp/$name.found" > "$tmp/$name.diff" || { cat "$tmp/$name.diff"; fail "$name: installed files"; }
    local d=$dest$libdir
    [ "$(readlink "$d/libspeechclient.so.$major")" = "libspeechclient.so.$version" ] || fail "$name: libspeechclient.so.$major -> $(readlink "$d/libspeechclient.so.$major")"
    [ "$(readlink "$d/libspeechclient.so")" = "libspeechclient.so.$major" ] || fail "$name: libspeechclient.so -> $(readlink "$d/libspeechclient.so")"
    [ "$(stat -c %a "$d/libspeechclient.so.$version")" = 644 ] || fail "$name: the library's mode is $(stat -c %a "$d/libspeechclient.so.$version"), not 644"
    cmp -s "$dest$prefix/include/speechclient.h" "$header" || fail "$name: installed header differs from $header"
    readelf -d "$d/libspeechclient.so.$version" > "$tmp/$name.dyn"
    grep -q "(SONAME).*\[libspeechclient.so.$major\]" "$tmp/$name.dyn" || fail "$name: SONAME is not libspeechclient.so.$major"
    ! grep -qE '\((RPATH|RUNPATH)\)' "$tmp/$name.dyn" || fail "$name: the library has an RPATH/RUNPATH"
    readelf -d "$dest$prefix/bin/speechclient-demo" > "$tmp/$name.demo.dyn"
    grep -q "(NEEDED).*\[libspeechclient.so.$major\]" "$tmp/$name.demo.dyn" || fail "$name: the demo does not link libspeechclient.so.$major"
    ! grep -qE '\((RPATH|RUNPATH)\)' "$tmp/$name.demo.dyn" || fail "$name: the installed demo has an RPATH/RUNPATH"

    # The .pc file as pkg-config reads it (system-path filtering off, so -I/usr/include shows).
    local pc=(env PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1 pkg-config --with-path="$d/pkgconfig")
    [ "$("${pc[@]}" --modversion speechclient)" = "$version" ] || fail "$name: pkg-config --modversion: $("${pc[@]}" --modversion speechclient)"
    [ "$("${pc[@]}" --variable=libdir speechclient)" = "$libdir" ] || fail "$name: pkg-config libdir: $("${pc[@]}" --variable=libdir speechclient)"
    [ "$("${pc[@]}" --variable=includedir speechclient)" = "$prefix/include" ] || fail "$name: pkg-config includedir"
    [ "$("${pc[@]}" --cflags speechclient | xargs)" = "-I$prefix/include" ] || fail "$name: pkg-config --cflags: $("${pc[@]}" --cflags speechclient)"
    [ "$("${pc[@]}" --libs speechclient | xargs)" = "-L$libdir -lspeechclient" ] || fail "$name: pkg-config --libs: $("${pc[@]}" --libs speechclient)"
    # Static linking is not offered: nothing private to list.
    [ -z "$("${pc[@]}" --print-requires-private speechclient)" ] || fail "$name: unexpected Requires.private"

    # The version test, built through pkg-config against the installed layout (the .pc's
    # prefix and libdir pointed into DESTDIR).
    local flags
    flags=$("${pc[@]}" --define-variable=prefix="$dest$prefix" --define-variable=libdir="$d" --cflags --libs speechclient)
    # shellcheck disable=SC2086
    if ! $CC -std=c11 -Wall -Wextra -Werror -pedantic "$tmp/version.c" $flags -o "$tmp/$name.version" 2> "$tmp/$name.cc"; then
        cat "$tmp/$name.cc"; fail "$name: the version test does not build with pkg-config's flags ($flags)"; return
    fi
    local out
    if out=$(LD_LIBRARY_PATH="$d" "$tmp/$name.version"); then :; else fail "$name: spc_version_number() != SPC_VERSION_NUMBER: $out"; fi
    # Captured first: `ldd | grep -q` fails under pipefail when grep exits before ldd finished
    # writing (SIGPIPE), and did, once in a few runs.
    local loaded
    loaded=$(LD_LIBRARY_PATH="$d" ldd "$tmp/$name.version")
    grep -q "libspeechclient.so.$major => $d/libspeechclient.so.$major" <<< "$loaded" \
        || fail "$name: the version test did not load the installed library"
    echo "packaging: $name: $(wc -l < "$tmp/$name.found") files under $prefix, $out"
}

check_layout local /usr/local /usr/local/lib
check_layout debian /usr "/usr/lib/$multiarch"

# The Python binding, found by SONAME only (its directory on LD_LIBRARY_PATH, as ld.so.conf would have it).
d=$tmp/debian/usr/lib/$multiarch
if py=$(env -u SPEECHCLIENT_LIBRARY LD_LIBRARY_PATH="$d" PYTHONPATH="$top/bindings/python" "$PYTHON" -c '
import os, sys, speechclient
from speechclient import _native
maps = open("/proc/self/maps").read()
paths = {os.path.realpath(l.split()[-1]) for l in maps.splitlines() if "libspeechclient" in l}
print(_native.LOADED_VERSION, _native.LIBRARY_PATH, *sorted(paths))
sys.exit(0 if paths == {os.path.realpath(sys.argv[1])} else 1)' "$d/libspeechclient.so.$version" 2>&1); then
    echo "packaging: python binding loaded: $py"
else
    fail "python binding did not load the installed library by SONAME: $py"
fi

# The ABI policy is written down and covers what it must.
if [ -f docs/ABI.md ]; then
    for word in SONAME _v2 exports.map spc_version_number SPC_VERSION_NUMBER libspeechclient0.symbols; do
        grep -q -- "$word" docs/ABI.md || fail "docs/ABI.md does not mention $word"
    done
    grep -q 'docs/ABI.md' README.md || fail "README.md does not point to docs/ABI.md"
    # Its table of the current values agrees with the header and the version script.
    number=$(sed -n 's/^#define SPC_VERSION_NUMBER \([0-9]*\)$/\1/p' "$header")
    grep -q "SPC_VERSION_STRING \"$version\"" docs/ABI.md || fail "docs/ABI.md does not give the version as $version"
    grep -q "SPC_VERSION_NUMBER $number\b" docs/ABI.md || fail "docs/ABI.md does not give SPC_VERSION_NUMBER $number"
    for node in $(grep -o '^SPEECHCLIENT_0[.0-9]*' Sources/SpeechClientCAPI/exports.map); do
        grep -q "\`$node\`" docs/ABI.md || fail "docs/ABI.md does not list the version node $node"
    done
else
    fail "docs/ABI.md is missing"
fi

# debian/ agrees with the header and the library.
if [ -d debian ]; then
    changelog_version=$(sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p' debian/changelog)
    [ "$changelog_version" = "$version" ] || fail "debian/changelog is at $changelog_version, the header at $version"
    grep -q "^Package: libspeechclient$major\$" debian/control || fail "debian/control has no package libspeechclient$major"
    [ -f "debian/libspeechclient$major.symbols" ] || fail "debian/libspeechclient$major.symbols is missing"
    head -1 "debian/libspeechclient$major.symbols" | grep -q "^libspeechclient.so.$major libspeechclient$major " \
        || fail "debian/libspeechclient$major.symbols does not describe libspeechclient.so.$major"
    scripts/update-symbols.sh --check "$lib" | sed 's/^/packaging: /' || fail "debian/libspeechclient$major.symbols"
fi

if [ "$fails" -gt 0 ]; then echo "packaging: $fails check(s) failed"; exit 1; fi
echo "packaging: ok"
