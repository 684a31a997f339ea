# A clean Debian 12 root for the smoke tests (deb-smoke.sh, wheel-smoke.sh). Sourced after the
# script has set `me` (its name, for messages), `root` (where the root goes) and `work` (logs).

# Root, the tools the smoke tests use, and the repository's venv with the reference server.
smoke_preconditions() {
    [ "$(id -u)" = 0 ] || { echo "$me: run as root (debootstrap, chroot)" >&2; exit 2; }
    local tool
    for tool in debootstrap chroot espeak-ng sox; do
        command -v "$tool" > /dev/null || { echo "$me: $tool is missing" >&2; exit 2; }
    done
    [ -x .venv/bin/python ] || { echo "$me: no .venv (run scripts/setup-debian.sh)" >&2; exit 2; }
}

# The first bookworm "main" source of the host, in one-line or deb822 format (empty if none).
bookworm_mirror() {
    (cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2> /dev/null || true) |
        awk '
          /^deb / && $3 == "bookworm" { sub(/\[[^]]*\] /, ""); print $2; exit }
          /^[ \t]*$/ { uri = ""; suites = ""; next }
          /^URIs:/ { uri = $2 } /^Suites:/ { suites = $0 }
          uri != "" && suites ~ /[ \t]bookworm([ \t]|$)/ { print uri; exit }'
}

# make_bookworm_root MIRROR: debootstrap --variant=minbase into $root, apt pointed at MIRROR,
# the host's resolver, /proc mounted (the caller unmounts it).
make_bookworm_root() {
    local mirror=$1
    [ -n "$mirror" ] || { echo "$me: no bookworm mirror found in /etc/apt/sources.list(.d); use --mirror" >&2; exit 2; }
    if ! debootstrap --variant=minbase bookworm "$root" "$mirror" > "$work/debootstrap.log" 2>&1; then
        tail -20 "$work/debootstrap.log"; echo "$me: FAIL: debootstrap" >&2; exit 1
    fi
    echo "deb $mirror bookworm main" > "$root/etc/apt/sources.list"
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2> /dev/null || true
    mount -t proc proc "$root/proc"
}

in_root() { chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
