#!/bin/sh
# Builds the C++ sink server and the grpc++ peer client into bench/out/cxx from the project's
# .proto files, against Debian's libgrpc++-dev and protobuf-compiler-grpc. Exits 3 when they are
# not installed (the bench then runs without the C++ peer and without the fast sink).
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=$here/out/cxx
if ! command -v protoc >/dev/null || ! command -v grpc_cpp_plugin >/dev/null || ! pkg-config --exists grpc++ protobuf; then
    echo "build-cxx: protoc, grpc_cpp_plugin or grpc++ missing (apt-get install libgrpc++-dev libprotobuf-dev protobuf-compiler-grpc)" >&2
    exit 3
fi
mkdir -p "$out/gen"
protos="speechly/slu/v1/slu.proto speechly/identity/v2/identity.proto"
stamp="$out/gen/.stamp"
regen=0
[ -f "$stamp" ] || regen=1
for p in $protos; do [ "$root/proto/$p" -nt "$stamp" ] && regen=1; done
[ $regen = 1 ] && (cd "$root/proto" && protoc -I. --cpp_out="$out/gen" --grpc_out="$out/gen" \
    --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" $protos) && touch "$stamp"
CXX=${CXX:-g++}
flags="-std=c++17 -O2 -I$out/gen $(pkg-config --cflags grpc++ protobuf)"
libs="$(pkg-config --libs grpc++ protobuf) -lpthread"
gen="$out/gen/speechly/slu/v1/slu.pb.cc $out/gen/speechly/slu/v1/slu.grpc.pb.cc \
     $out/gen/speechly/identity/v2/identity.pb.cc $out/gen/speechly/identity/v2/identity.grpc.pb.cc"
# The generated code once, as objects shared by both programs.
objs=""
for f in $gen; do
    o="$out/$(basename "$f" .cc).o"
    if [ ! -f "$o" ] || [ "$f" -nt "$o" ]; then $CXX $flags -c "$f" -o "$o"; fi
    objs="$objs $o"
done
for prog in sink_server grpcxx_client; do
    src="$here/cxx/$prog.cc"
    [ -f "$src" ] || continue
    if [ ! -x "$out/$prog" ] || [ "$src" -nt "$out/$prog" ]; then
        $CXX $flags "$src" $objs $libs -o "$out/$prog"
    fi
done
echo "build-cxx: ok ($out)"
