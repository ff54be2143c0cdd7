#!/usr/bin/env bash
# Encryption at rest, benchmarked in one run: a fresh 3-member `cairn up` with encryption off, with aesgcm, and
# with the reference KMS plugin (cmd/cairn-kms), each under the same rows: put from 1000 clients and linearizable
# and serializable range, with 1 KiB and 100 KiB values. Prints Requests/sec per row and mode.
#
#   scripts/bench-encryption.sh            # full size (about 10 minutes on 2 cores)
#   SCALE=10 scripts/bench-encryption.sh   # totals divided by 10, for a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
scale=${SCALE:-1}
# CAIRN=/path/cairn and CAIRN_KMS=/path/cairn-kms skip the build (e.g. binaries built elsewhere).
if [[ -z "${CAIRN:-}" ]]; then
  go build -o bin/cairn ./cmd/cairn
  CAIRN=$PWD/bin/cairn
fi
if [[ -z "${CAIRN_KMS:-}" ]]; then
  go build -o bin/cairn-kms ./cmd/cairn-kms
  CAIRN_KMS=$PWD/bin/cairn-kms
fi
work=$(mktemp -d)
trap 'kill $up_pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
secret=$(head -c 32 /dev/urandom | base64)
"$CAIRN_KMS" rotate --key-file "$work/kms.json" >/dev/null
cat >"$work/aesgcm.yaml" <<YAML
kind: EncryptionConfiguration
resources:
- prefixes: [""]
  providers:
  - aesgcm: {keys: [{name: key1, secret: $secret}]}
YAML
cat >"$work/kms.yaml" <<YAML
kind: EncryptionConfiguration
resources:
- prefixes: [""]
  providers:
  - kms: {name: local-kms, command: $CAIRN_KMS, args: [--key-file, $work/kms.json]}
YAML
port=$((20000 + RANDOM % 20000))
endpoint=127.0.0.1:$port
bench() { "$CAIRN" bench --endpoints="$endpoint" --conns=100 --clients=1000 "$@" 2>/dev/null | awk '/Requests\/sec/ {print $2}'; }
printf '%-8s %-7s %12s %12s %12s\n' mode value put/s range-l/s range-s/s
for mode in off aesgcm kms; do
  args=()
  [ "$mode" != off ] && args=(--encryption-config "$work/$mode.yaml")
  "$CAIRN" up --data-dir "$work/up-$mode" --client-port "$port" "${args[@]}" >"$work/up-$mode.out" 2>&1 &
  up_pid=$!
  for _ in $(seq 600); do grep -q "cairn is up" "$work/up-$mode.out" && break; sleep 0.1; done
  for size in 1024 102400; do
    total=$(( (size == 1024 ? 100000 : 10000) / scale ))
    put=$(bench put --key-size=8 --sequential-keys --total="$total" --val-size="$size")
    # the key the ranges read, holding one value of this size (through the JSON gateway)
    printf '{"key":"%s","value":"%s"}' "$(printf rangekey | base64)" "$(head -c "$size" /dev/zero | tr '\0' v | base64 -w0)" >"$work/put.json"
    curl -sf "http://$endpoint/v3/kv/put" -d @"$work/put.json" >/dev/null
    rl=$(bench range rangekey --consistency=l --total="$total")
    rs=$(bench range rangekey --consistency=s --total="$total")
    printf '%-8s %-7s %12s %12s %12s\n' "$mode" "$((size / 1024))KiB" "$put" "$rl" "$rs"
  done
  kill -INT $up_pid; wait $up_pid || true
done
