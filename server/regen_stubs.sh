#!/usr/bin/env bash
# Regenerates the committed Python stubs in speechclient_server/_proto from ../proto.
#
#   pip install -e ./server      # brings grpcio-tools, pinned to the same version as grpcio
#   server/regen_stubs.sh
#
# The stubs are committed so that running the server needs no code generation; regenerate
# them (and commit) whenever a .proto changes or grpcio/grpcio-tools are re-pinned. Stubs from
# grpcio-tools 1.85 check at import time for protobuf >= 7.35 and grpcio >= 1.85.1, which is
# what pyproject.toml requires. The imports are rewritten to be package-relative.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
out=speechclient_server/_proto
protos=(speechly/identity/v1/identity.proto speechly/identity/v2/identity.proto speechly/slu/v1/slu.proto)
rm -rf "$out/speechly"
mkdir -p "$out"
"$PYTHON" -m grpc_tools.protoc -I ../proto --python_out="$out" --grpc_python_out="$out" "${protos[@]}"
touch "$out/__init__.py"
find "$out/speechly" -type d -exec touch {}/__init__.py \;
# "from speechly.x.y import z_pb2" -> "from speechclient_server._proto.speechly.x.y import z_pb2"
sed -i 's/^from speechly\./from speechclient_server._proto.speechly./' "$out"/speechly/*/*/*_pb2_grpc.py
echo "regenerated: $(cd "$out" && find speechly -name '*.py' ! -name '__init__.py' | sort | tr '\n' ' ')"
