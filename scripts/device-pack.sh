#!/usr/bin/env bash
# Packs what scripts/device-watch-scale.sh needs on the many-core device machine, which starts bare (no Go, no
# module proxy): static builds (cgo off) of cairn and of etcd v3.7.3 as internal/tools/etcdref builds it,
# gzip-compressed into .device/ (ignored by git; about 35 MB, inside the 64 MiB a device call may carry).
#
#   scripts/device-pack.sh
#   then, with the device tool: run  command: scripts/device-watch-scale.sh  carry: [".device"]  timeout_s: 600
#
# The cairn binary keeps its symbols, so the hub's CPU profile that comes back reads here with
# `gzip -dc .device/cairn.gz >/tmp/cairn-device; go tool pprof /tmp/cairn-device hub-cpu.pb.gz` (and relay-cpu.pb.gz).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.device build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
mkdir -p "$dir"
echo "building cairn (static)"
CGO_ENABLED=0 go build -trimpath -o "$build/cairn" ./cmd/cairn
echo "building etcd $(sed -n 's/^const Version = "\(.*\)"/\1/p' internal/tools/etcdref/build.go) (static) and checking it runs a cluster"
CGO_ENABLED=0 CAIRN_ETCD_BIN_DIR=$build/etcd go test -count=1 -run TestClusterServesClientV3AndEtcdctl \
	./internal/testing/etcdreftest >/dev/null
for bin in "$build/cairn" "$build/etcd/etcd"; do
	if ! file "$bin" | grep -q "statically linked"; then
		echo "$bin is not statically linked" >&2
		exit 1
	fi
	gzip -9 -c "$bin" >"$dir/$(basename "$bin").gz"
done
ls -l "$dir"
