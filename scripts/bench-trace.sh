#!/usr/bin/env bash
# What tracing costs, in one run: a fresh `cairn up` per mode, each under put from 1000 clients and
# linearizable range from 1000 clients, rounds interleaved. Prints Requests/sec. The modes:
#   off        tracing off
#   0.01-none  --trace-sample-ratio 0.01, spans sampled and recorded but exported nowhere
#              (OTEL_TRACES_EXPORTER=none): what 1% costs inside the services, without export or receiver
#   0.01       --trace --trace-sample-ratio 0.01: exporting to the stack's `cairn trace` child, which shares the
#              machine's cores (0.01 minus 0.01-none is the export and the receiver)
#   1          --trace --trace-sample-ratio 1: every request traced
#
#   scripts/bench-trace.sh                                   # builds bin/cairn
#   ROUNDS=3 PUT_TOTAL=20000 RANGE_TOTAL=40000 CAIRN=/path/cairn scripts/bench-trace.sh
#   MODES="off 0.01-none" scripts/bench-trace.sh             # some of the modes
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
	for mode in ${MODES:-off 0.01-none 0.01 1}; do
		case $mode in
		off) up_start "up-$mode-$round" ;;
		*-none) # sampled and recorded in every child, exported nowhere
			OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9 OTEL_TRACES_EXPORTER=none \
				up_start "up-$mode-$round" --trace-sample-ratio "${mode%-none}" ;;
		*) up_start "up-$mode-$round" --trace --trace-sample-ratio "$mode" ;;
		esac
		rate "$endpoints" "" --total 1 put >/dev/null || true # warm-up
		line "tracing $mode" \
			"$(rate "$endpoints" "" --conns 100 --clients 1000 --total "$PUT_TOTAL" put --key-size 8 --val-size 256)" \
			"$(rate "$endpoints" "" --conns 100 --clients 1000 --total "$RANGE_TOTAL" range foo --consistency l)"
		stop_last
	done
done
