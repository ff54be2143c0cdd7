#!/usr/bin/env bash
# What tracing costs, in one run: a fresh `cairn up` with tracing off, with `--trace --trace-sample-ratio 0.01`
# and with `--trace --trace-sample-ratio 1` (every child exporting to the stack's `cairn trace` child), each under
# put from 1000 clients and linearizable range from 1000 clients, rounds interleaved. Prints Requests/sec.
#
#   scripts/bench-trace.sh                                   # builds bin/cairn
#   ROUNDS=3 PUT_TOTAL=20000 RANGE_TOTAL=40000 CAIRN=/path/cairn scripts/bench-trace.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PUT_TOTAL=${PUT_TOTAL:-10000}
RANGE_TOTAL=${RANGE_TOTAL:-20000}
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset), ETCD and ETCDCTL
trap 'bench_cleanup; rm -rf "$work"' EXIT

line() { printf '%-14s %16s %14s\n' "$@"; }
line "requests/s" "put 1000 clients" "range l"
for round in $(seq "${ROUNDS:-2}"); do
	for mode in off 0.01 1; do
		args=()
		[[ $mode != off ]] && args=(--trace --trace-sample-ratio "$mode")
		up_start "up-$mode-$round" "${args[@]}"
		rate "$endpoints" "" --total 1 put >/dev/null || true # warm-up
		line "tracing $mode" \
			"$(rate "$endpoints" "" --conns 100 --clients 1000 --total "$PUT_TOTAL" put --key-size 8 --val-size 256)" \
			"$(rate "$endpoints" "" --conns 100 --clients 1000 --total "$RANGE_TOTAL" range foo --consistency l)"
		stop_last
	done
done
