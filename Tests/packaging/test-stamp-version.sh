#!/bin/sh
# scripts/stamp-version.sh against a copy of the files it reads and writes: a new VERSION makes
# --check fail naming each file, stamping writes them, and a malformed VERSION is refused.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
tar cf - VERSION scripts/stamp-version.sh include/speechclient.h bindings/python/speechclient/_native.py \
    debian/speechclient-demo.1 debian/changelog docs/ABI.md | tar xf - -C "$tmp"
cd "$tmp"
fail() { echo "test-stamp-version: FAIL: $*"; exit 1; }
scripts/stamp-version.sh --check || fail "the tree as committed does not pass --check"
echo 7.8.9 > VERSION
if scripts/stamp-version.sh --check 2> err; then fail "--check passed with VERSION changed"; fi
for f in include/speechclient.h bindings/python/speechclient/_native.py debian/speechclient-demo.1 docs/ABI.md debian/changelog; do
    grep -q "$f" err || fail "--check did not name $f"
done
scripts/stamp-version.sh > /dev/null 2>&1 || fail "stamping failed"
grep -q '^#define SPC_VERSION_NUMBER 7008009$' include/speechclient.h || fail "header not stamped"
grep -q '^SPC_VERSION_STRING = "7.8.9"$' bindings/python/speechclient/_native.py || fail "binding not stamped"
grep -q 'SPC_VERSION_NUMBER 7008009' docs/ABI.md || fail "ABI.md not stamped"
# Only the changelog (written by a person) still disagrees.
scripts/stamp-version.sh --check 2> err && fail "--check passed with the changelog behind"
[ "$(grep -c . err)" = 1 ] && grep -q changelog err || fail "--check named more than the changelog: $(cat err)"
for bad in 1.x 1.2 1.2.3.4 0.1000.0 ""; do
    echo "$bad" > VERSION
    if scripts/stamp-version.sh --check 2>/dev/null; then fail "VERSION '$bad' was accepted"; fi
done
echo "test-stamp-version: ok"
