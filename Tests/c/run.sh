#!/usr/bin/env bash
# The C suite against the INSTALLED layout: make install into a temporary DESTDIR, check what
# was installed, build test_api.c as C11 and as C++17 with pkg-config's flags, run both (once
# with the Swift toolchain hidden), then the demo's command-line tests.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/root

make -s install NO_BUILD=1 DESTDIR="$dest" PREFIX=/usr LIBDIR=/usr/lib >/dev/null
lib=$dest/usr/lib
version=$(sed -n 's/^#define SPC_VERSION_STRING "\(.*\)"$/\1/p' include/speechclient.h)
fail=0
expect() { if ! eval "$1"; then echo "run.sh: layout check failed: $2"; fail=1; fi; }
expect "[ -f $lib/libspeechclient.so.$version ] && [ ! -L $lib/libspeechclient.so.$version ]" "lib/libspeechclient.so.$version"
expect "[ \"\$(readlink $lib/libspeechclient.so.0)\" = libspeechclient.so.$version ]" "lib/libspeechclient.so.0 -> .so.$version"
expect "[ \"\$(readlink $lib/libspeechclient.so)\" = libspeechclient.so.0 ]" "lib/libspeechclient.so -> .so.0"
expect "cmp -s include/speechclient.h $dest/usr/include/speechclient.h" "include/speechclient.h"
expect "[ -f $lib/pkgconfig/speechclient.pc ]" "lib/pkgconfig/speechclient.pc"
expect "[ -x $dest/usr/bin/speechclient-demo ]" "bin/speechclient-demo"
# Stripped: no static symbol table left (readelf, so no dependence on file(1)). Not grep -q:
# under pipefail it can exit before readelf's second write and fail the check with SIGPIPE.
expect "readelf -S $lib/libspeechclient.so.$version | grep '\.dynsym' >/dev/null && ! readelf -S $lib/libspeechclient.so.$version | grep '\.symtab' >/dev/null" "the .so is stripped"
# SONAME, no RUNPATH, no Swift runtime in NEEDED, exports == header: abi-check on the install.
if ! abi=$(Tests/c/abi-check.sh "$lib/libspeechclient.so.$version" 2>&1); then
  echo "$abi"; echo "run.sh: layout check failed: abi-check on the installed .so"; fail=1
fi
# The suite calls every function of the header.
for f in $(perl -0777 -ne 's{/\*.*?\*/}{ }gs; print "$1\n" while /SPC_API[^;(]*?\b(spc_\w+)\s*\(/g' include/speechclient.h); do
  grep -q "\b$f(" Tests/c/test_api.c || { echo "run.sh: Tests/c/test_api.c never calls $f"; fail=1; }
done

export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest
flags=$(pkg-config --cflags --libs speechclient)
expect "[ \"\$(pkg-config --modversion speechclient)\" = $version ]" "pkg-config --modversion"
gcc -std=c11 -Wall -Wextra -Werror -pedantic Tests/c/test_api.c $flags -lpthread -o "$tmp/test_api_c"
g++ -std=c++17 -x c++ -Wall -Wextra -Werror -pedantic Tests/c/test_api.c -x none $flags -lpthread -o "$tmp/test_api_cpp"
export LD_LIBRARY_PATH=$lib
# A deadlock must fail the run, not hang it.
for t in test_api_c test_api_cpp; do
  rc=0; timeout 300 "$tmp/$t" || rc=$?
  if [ "$rc" = 124 ]; then echo "run.sh: $t did not finish within 300 s (a deadlock?)"; fail=1;
  elif [ "$rc" != 0 ]; then echo "run.sh: $t FAILED (exit status $rc)"; fail=1; fi
done

# An application's own ALSA error handler keeps its messages once the library has used ALSA.
gcc -std=c11 -Wall -Wextra -Werror -pedantic Tests/c/test_alsa_handler.c $flags -lasound -o "$tmp/test_alsa_handler"
rc=0; timeout 60 "$tmp/test_alsa_handler" || rc=$?
[ "$rc" = 0 ] || { echo "run.sh: test_alsa_handler FAILED (exit status $rc)"; fail=1; }

# The misuse table: every client call in every state; the LISTENING column needs the reference
# server, started here on loopback and stopped on exit.
gcc -std=c11 -Wall -Wextra -Werror -pedantic Tests/c/test_misuse.c $flags -o "$tmp/test_misuse_c"
g++ -std=c++17 -x c++ -Wall -Wextra -Werror -pedantic Tests/c/test_misuse.c -x none $flags -o "$tmp/test_misuse_cpp"
python=${PYTHON:-.venv/bin/python}
"$python" -m speechclient_server --host 127.0.0.1 --port 0 >"$tmp/server.out" 2>"$tmp/server.err" &
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do grep -q '^listening on ' "$tmp/server.out" 2>/dev/null && break; sleep 0.1; done
server_url="grpc://$(sed -n 's/^listening on //p' "$tmp/server.out")"
[ "$server_url" != grpc:// ] || { cat "$tmp/server.err"; echo "run.sh: the reference server did not start"; fail=1; }
for t in test_misuse_c test_misuse_cpp; do
  rc=0; timeout 300 "$tmp/$t" "$server_url" || rc=$?
  if [ "$rc" = 124 ]; then echo "run.sh: $t did not finish within 300 s (a deadlock?)"; fail=1;
  elif [ "$rc" != 0 ]; then echo "run.sh: $t FAILED (exit status $rc)"; fail=1; fi
done
kill $server_pid 2>/dev/null || true

# Where no Swift toolchain exists: hide /opt/swift in a private mount namespace and load the
# library from a C program built against the install.
cat > "$tmp/hello.c" <<'C'
#include <speechclient.h>
#include <stdio.h>
int main(void) { printf("%s\n", spc_version()); return spc_version_number() == SPC_VERSION_NUMBER ? 0 : 1; }
C
gcc -std=c11 -Wall -Wextra -Werror -pedantic "$tmp/hello.c" $flags -o "$tmp/hello"
swift_dir=/opt/swift
if [ ! -d "$swift_dir" ] && command -v swift >/dev/null; then
  swift_dir=$(dirname "$(dirname "$(dirname "$(command -v swift)")")")
fi
if unshare -m true 2>/dev/null; then
  mkdir -p "$tmp/empty"
  out=$(unshare -m sh -c "mount --bind '$tmp/empty' '$swift_dir' && ls '$swift_dir' | wc -l && '$tmp/hello'")
  expect "[ \"\$(echo \"$out\" | tail -1)\" = $version ] && [ \"\$(echo \"$out\" | head -1)\" = 0 ]" \
    "spc_version() with $swift_dir hidden (got: $out)"
  echo "run.sh: spc_version() = $version with $swift_dir hidden"
else
  echo "run.sh: SKIPPED the hidden-toolchain check: unshare -m is not permitted here"
fi

PATH="$dest/usr/bin:$PATH" Tests/c/test_demo.sh "$dest/usr/bin/speechclient-demo" || fail=1
[ "$fail" = 0 ] || exit 1
echo "run.sh: ok"
