#!/bin/sh
# The one version number: VERSION holds MAJOR.MINOR.PATCH; this writes it wherever a file must
# spell it out (the header's SPC_VERSION_* macros, the binding's copy of them, the man page, the
# current-version rows of docs/ABI.md), and
# checks the one place a person writes by hand (debian/changelog's top entry: a release needs a
# changelog entry, which no script should invent). The Swift core reads the header's macros,
# the .so's file name and pkg-config file come from the Makefile's $(VERSION), the wheel's
# version from the binding (pyproject.toml: dynamic). `make` runs this before every build.
#
#   scripts/stamp-version.sh          stamp the files (no-op when they agree)
#   scripts/stamp-version.sh --check  change nothing; fail naming each file that disagrees
set -eu
cd "$(dirname "$0")/.."
check=0
[ "${1-}" = --check ] && check=1

version=$(tr -d ' \n' < VERSION)
case "$version" in
    *[!0-9.]*|.*|*.|*..*) echo "stamp-version: VERSION holds '$version', not MAJOR.MINOR.PATCH" >&2; exit 1 ;;
esac
IFS=. read -r major minor patch extra <<EOV
$version
EOV
if [ -z "$patch" ] || [ -n "${extra-}" ]; then
    echo "stamp-version: VERSION holds '$version', not MAJOR.MINOR.PATCH" >&2; exit 1
fi
# Leading zeros would read as octal in C: 0.09.0 is stamped 0.9.0.
strip_zeros() { echo "$1" | sed 's/^0*\([0-9]\)/\1/'; }
major=$(strip_zeros "$major"); minor=$(strip_zeros "$minor"); patch=$(strip_zeros "$patch")
if [ "$minor" -gt 999 ] || [ "$patch" -gt 999 ]; then
    echo "stamp-version: MINOR and PATCH must be below 1000 (SPC_VERSION_NUMBER = MAJOR*1000000 + MINOR*1000 + PATCH)" >&2; exit 1
fi
number=$((major * 1000000 + minor * 1000 + patch))
string="$major.$minor.$patch"

status=0
# stamp FILE SED-SCRIPT: the file as the script makes it; written only when it differs.
stamp() {
    file=$1; shift
    tmp="$file.stamp.$$"
    sed "$@" "$file" > "$tmp"
    if cmp -s "$file" "$tmp"; then
        rm -f "$tmp"
    elif [ $check = 1 ]; then
        rm -f "$tmp"
        echo "stamp-version: $file does not carry version $string from VERSION (run scripts/stamp-version.sh, or make)" >&2
        status=1
    else
        cat "$tmp" > "$file"  # keeps the file's mode
        rm -f "$tmp"
        echo "stamp-version: $file now carries $string"
    fi
}

stamp include/speechclient.h \
    -e "s/^#define SPC_VERSION_MAJOR .*/#define SPC_VERSION_MAJOR $major/" \
    -e "s/^#define SPC_VERSION_MINOR .*/#define SPC_VERSION_MINOR $minor/" \
    -e "s/^#define SPC_VERSION_PATCH .*/#define SPC_VERSION_PATCH $patch/" \
    -e "s/^#define SPC_VERSION_STRING .*/#define SPC_VERSION_STRING \"$string\"/" \
    -e "s/^#define SPC_VERSION_NUMBER .*/#define SPC_VERSION_NUMBER $number/"
stamp bindings/python/speechclient/_native.py \
    -e "s/^SPC_VERSION_MAJOR = .*/SPC_VERSION_MAJOR = $major/" \
    -e "s/^SPC_VERSION_MINOR = .*/SPC_VERSION_MINOR = $minor/" \
    -e "s/^SPC_VERSION_PATCH = .*/SPC_VERSION_PATCH = $patch/" \
    -e "s/^SPC_VERSION_STRING = .*/SPC_VERSION_STRING = \"$string\"/" \
    -e "s/^SPC_VERSION_NUMBER = .*/SPC_VERSION_NUMBER = $number/"
stamp debian/speechclient-demo.1 \
    -e "1s/\"libspeechclient [0-9.]*\"/\"libspeechclient $string\"/"
# The "now" column of docs/ABI.md's table of names and numbers.
stamp docs/ABI.md \
    -e "s/^| version | \`SPC_VERSION_STRING \"[0-9.]*\"\`/| version | \`SPC_VERSION_STRING \"$string\"\`/" \
    -e "s/^| version number | \`SPC_VERSION_NUMBER [0-9]*\`/| version number | \`SPC_VERSION_NUMBER $number\`/" \
    -e "s/^| file | \`libspeechclient\.so\.[0-9.]*\`/| file | \`libspeechclient.so.$string\`/"

changelog=$(sed -n '1s/^speechclient (\([^)]*\)).*/\1/p' debian/changelog)
# A Debian revision (0.9.0-1) or a pre-release suffix (0.9.0~rc1) still names this version.
case "$changelog" in
    "$string"|"$string"-*|"$string"~*) ;;
    # A build goes on (a developer bumps VERSION first); --check (make test, the .deb build) fails.
    *) echo "stamp-version: debian/changelog's top entry is $changelog, VERSION is $string: add an entry (dch -v $string)" >&2
       [ $check = 0 ] || status=1 ;;
esac
exit $status
