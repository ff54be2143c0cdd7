#!/usr/bin/env bash
# Regenerates every *.pb.go under api from the .proto files beside them.
# Needs protoc (Debian: apt-get install protobuf-compiler); the Go plugins are go.mod tools,
# and etcd's own .proto files come from the module cache, so the output depends only on go.mod.
set -euo pipefail
cd "$(dirname "$0")"
command -v protoc >/dev/null || { echo "gen.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }

etcd_api=$(go list -m -f '{{.Dir}}' go.etcd.io/etcd/api/v3)
[ -n "$etcd_api" ] || { go mod download go.etcd.io/etcd/api/v3; etcd_api=$(go list -m -f '{{.Dir}}' go.etcd.io/etcd/api/v3); }
gateway_v1=$(go mod download -json github.com/grpc-ecosystem/grpc-gateway@v1.16.0 | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
gateway_v2=$(go list -m -f '{{.Dir}}' github.com/grpc-ecosystem/grpc-gateway/v2)

# etcd's protos import each other as "etcd/api/<pkg>/<file>.proto" and, inside etcdserverpb, as "rpc.proto".
include=$(mktemp -d)
trap 'rm -rf "$include"' EXIT
mkdir -p "$include/etcd"
ln -s "$etcd_api" "$include/etcd/api"

protoc_gen_go=$(go tool -n protoc-gen-go)
protoc_gen_go_grpc=$(go tool -n protoc-gen-go-grpc)

mapfile -t protos < <(find . -name '*.proto' | sed 's|^\./||' | sort)
[ ${#protos[@]} -gt 0 ] || { echo "gen.sh: no .proto files"; exit 0; }
protoc \
  -I . \
  -I "$include" \
  -I "$etcd_api/etcdserverpb" \
  -I "$gateway_v1/third_party/googleapis" \
  -I "$gateway_v2" \
  --plugin=protoc-gen-go="$protoc_gen_go" \
  --plugin=protoc-gen-go-grpc="$protoc_gen_go_grpc" \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  "${protos[@]}"
echo "gen.sh: generated ${#protos[@]} proto file(s)"

# Group each generated file's imports as the rest of the code does: the standard library first, then a blank
# line, then the modules (protoc-gen-go sorts them as one group).
for f in $(find . -name '*.pb.go'); do
  awk '
    /^import \($/ { inblock = 1; print; next }
    inblock && /^\)$/ {
      for (i = 0; i < ns; i++) print std[i]
      if (ns > 0 && nm > 0) print ""
      for (i = 0; i < nm; i++) print mod[i]
      inblock = 0; ns = 0; nm = 0; print; next
    }
    inblock && NF == 0 { next }
    inblock { path = $NF; gsub(/"/, "", path); split(path, parts, "/"); if (index(parts[1], ".") > 0) mod[nm++] = $0; else std[ns++] = $0; next }
    { print }
  ' "$f" > "$f.tmp" && mv "$f.tmp" "$f"
done
