#!/usr/bin/env bash
# Regenerates the committed Python stubs from ../proto with grpcio-tools (pinned in
# pyproject.toml to the grpcio version), and makes their imports package-relative.
set -euo pipefail
cd "$(dirname "$0")"
out=speechclient_server/_proto
python -m grpc_tools.protoc -I ../proto --python_out="$out" --grpc_python_out="$out" \
  speechly/identity/v2/identity.proto speechly/slu/v1/slu.proto
find "$out/speechly" -type d -exec touch {}/__init__.py \;
# "from speechly.x.y import z_pb2" -> "from speechclient_server._proto.speechly.x.y import z_pb2"
sed -i 's/^from speechly\./from speechclient_server._proto.speechly./' "$out"/speechly/*/*/*_pb2_grpc.py
