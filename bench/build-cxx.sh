#!/bin/sh
# Builds the C++ sink server and the grpc++ peer client into bench/out/cxx from the project's
# .proto files, against Debian's libgrpc++-dev and protobuf-compiler-grpc. Exits 3, naming each
# missing tool and its package, when they are not installed (scripts/setup-bench.sh installs them;
# bench/run.py and bench/soak.py then fail: without these there is no C++ peer and no fast sink).
# PROTOC, GRPC_CPP_PLUGIN and CXX name the tools (default: protoc, grpc_cpp_plugin, g++ on PATH).
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=$here/out/cxx
PROTOC=${PROTOC:-protoc}
GRPC_CPP_PLUGIN=${GRPC_CPP_PLUGIN:-grpc_cpp_plugin}
CXX=${CXX:-g++}
missing=""
command -v "$PROTOC" >/dev/null 2>&1 || missing="$missing, $PROTOC (package protobuf-compiler, with protobuf-compiler-grpc)"
command -v "$GRPC_CPP_PLUGIN" >/dev/null 2>&1 || missing="$missing, $GRPC_CPP_PLUGIN (package protobuf-compiler-grpc)"
command -v "${CXX%% *}" >/dev/null 2>&1 || missing="$missing, ${CXX%% *} (package g++)"
if ! command -v pkg-config >/dev/null 2>&1; then
    missing="$missing, pkg-config (package pkg-config)"
else
    pkg-config --exists grpc++ || missing="$missing, grpc++ for pkg-config (package libgrpc++-dev)"
    pkg-config --exists protobuf || missing="$missing, protobuf for pkg-config (package libprotobuf-dev)"
fi
if [ -n "$missing" ]; then
    echo "build-cxx: missing ${missing#, }; install them with scripts/setup-bench.sh (what make bench runs first)" \
        "or apt-get install libgrpc++-dev libprotobuf-dev protobuf-compiler-grpc g++ pkg-config" >&2
    exit 3
fi
mkdir -p "$out/gen"
protos="speechly/slu/v1/slu.proto speechly/identity/v2/identity.proto"
stamp="$out/gen/.stamp"
regen=0
[ -f "$stamp" ] || regen=1
for p in $protos; do [ "$root/proto/$p" -nt "$stamp" ] && regen=1; done
[ $regen = 1 ] && (cd "$root/proto" && "$PROTOC" -I. --cpp_out="$out/gen" --grpc_out="$out/gen" \
    --plugin=protoc-gen-grpc="$(command -v "$GRPC_CPP_PLUGIN")" $protos) && touch "$stamp"
# pkg-config takes seconds for grpc++ (abseil's many .pc files): asked only when something is built.
flags="" libs=""
pkg_flags() { [ -n "$flags" ] || flags="-std=c++17 -O2 -I$out/gen $(pkg-config --cflags grpc++ protobuf)"; }
pkg_libs() { pkg_flags; [ -n "$libs" ] || libs="$(pkg-config --libs grpc++ protobuf) -lpthread"; }
gen="$out/gen/speechly/slu/v1/slu.pb.cc $out/gen/speechly/slu/v1/slu.grpc.pb.cc \
     $out/gen/speechly/identity/v2/identity.pb.cc $out/gen/speechly/identity/v2/identity.grpc.pb.cc"
# The generated code once, as objects shared by both programs.
objs=""
for f in $gen; do
    o="$out/$(basename "$f" .cc).o"
    if [ ! -f "$o" ] || [ "$f" -nt "$o" ]; then pkg_flags; $CXX $flags -c "$f" -o "$o"; fi
    objs="$objs $o"
done
for prog in sink_server grpcxx_client; do
    src="$here/cxx/$prog.cc"
    [ -f "$src" ] || continue
    if [ ! -x "$out/$prog" ] || [ "$src" -nt "$out/$prog" ]; then
        pkg_libs
        $CXX $flags "$src" $objs $libs -o "$out/$prog"
    fi
done
echo "build-cxx: ok ($out)"
