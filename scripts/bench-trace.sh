#!/usr/bin/env bash
# What tracing costs: every mode against tracing off, in rounds of fresh `cairn up` stacks, each under put from
# 1000 clients then linearizable range from 1000 clients. A round runs off and each other mode once, in an order
# reversed every other round (off, 0.01-none, 0.01, then 0.01, 0.01-none, off, ...), so that drift and a stack's
# place in the round fall on every mode alike; it prints requests/s and each mode's ratio to the round's off.
# The summary is the median of those per-round ratios (and their range): rounds differ among themselves by more
# than the few percent measured, so only ratios within a round, on neighbouring stacks, are compared. The modes:
#   off        tracing off
#   0.01-none  --trace-sample-ratio 0.01, spans sampled and recorded but exported nowhere
#              (OTEL_TRACES_EXPORTER=none): what 1% costs inside the services, without export or receiver
#   0.01       --trace --trace-sample-ratio 0.01: exporting to the stack's `cairn trace` child, which shares the
#              machine's cores (0.01 minus 0.01-none is the export and the receiver)
#   1          --trace --trace-sample-ratio 1: every request traced (not in the default MODES)
# ROUNDS (default 6) is bounded by BUDGET_S (default 480): no round starts after that many seconds, so a slow
# machine gets fewer rounds, not a longer run (about 50 s a round of the default modes on 2 quiet cores).
#
#   scripts/bench-trace.sh                                   # builds bin/cairn
#   ROUNDS=8 PUT_TOTAL=20000 RANGE_TOTAL=40000 CAIRN=/path/cairn scripts/bench-trace.sh
#   MODES="off 0.01-none" scripts/bench-trace.sh             # some of the modes (off is always run)
set -euo pipefail
cd "$(dirname "$0")/.."
PUT_TOTAL=${PUT_TOTAL:-20000}
RANGE_TOTAL=${RANGE_TOTAL:-40000}
ROUNDS=${ROUNDS:-6}
BUDGET_S=${BUDGET_S:-480}
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset), ETCD and ETCDCTL
trap 'bench_cleanup; rm -rf "$work"' EXIT

modes=(off)
for mode in ${MODES:-off 0.01-none 0.01}; do [[ $mode == off ]] || modes+=("$mode"); done

# measure MODE ROUND: requests/s of put and range on a fresh stack in MODE, left in got_put and got_range.
measure() {
	local mode=$1 name="up-$1-$2"
	case $mode in
	off) up_start "$name" ;;
	*-none) # sampled and recorded in every child, exported nowhere
		OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9 OTEL_TRACES_EXPORTER=none \
			up_start "$name" --trace-sample-ratio "${mode%-none}" ;;
	*) up_start "$name" --trace --trace-sample-ratio "$mode" ;;
	esac
	rate "$endpoints" "" --total 1 put >/dev/null || true # warm-up
	got_put=$(rate "$endpoints" "" --conns 100 --clients 1000 --total "$PUT_TOTAL" put --key-size 8 --val-size 256 || true)
	got_range=$(rate "$endpoints" "" --conns 100 --clients 1000 --total "$RANGE_TOTAL" range foo --consistency l || true)
	stop_last
	# The next stack should not pay for this one's disk: write its dirty pages back now, and drop its data.
	rm -rf "${work:?}/$name"
	sync
}

# ratio A B: A/B to three decimals, empty when either is missing.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b }'; }

# summary FILE: "median (min-max), n" of the numbers in FILE, one a line.
summary() {
	[[ -s $1 ]] || { echo -; return; }
	sort -g "$1" | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print "-"; exit }
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%.3f (%.3f-%.3f, %d rounds)", m, v[1], v[NR], NR }'
}

line() { printf '%-6s %-10s %9s %9s %8s %9s %6s\n' "$@"; }
line round mode put/s range/s "put÷off" "range÷off" load
start=$SECONDS
for round in $(seq "$ROUNDS"); do
	if ((round > 1 && SECONDS - start > BUDGET_S)); then
		echo "BUDGET_S=$BUDGET_S spent: $((round - 1)) rounds" >&2
		break
	fi
	order=("${modes[@]}")
	if ((round % 2 == 0)); then
		order=()
		for ((i = ${#modes[@]} - 1; i >= 0; i--)); do order+=("${modes[i]}"); done
	fi
	declare -A put=() range=() load=()
	for mode in "${order[@]}"; do
		load[$mode]=$(cut -d' ' -f1 /proc/loadavg) # before the stack starts
		measure "$mode" "$round"
		put[$mode]=$got_put range[$mode]=$got_range
	done
	for mode in "${modes[@]}"; do
		put_ratio="" range_ratio=""
		if [[ $mode != off ]]; then
			put_ratio=$(ratio "${put[$mode]}" "${put[off]}")
			range_ratio=$(ratio "${range[$mode]}" "${range[off]}")
			[[ -z $put_ratio ]] || echo "$put_ratio" >>"$work/put-$mode"
			[[ -z $range_ratio ]] || echo "$range_ratio" >>"$work/range-$mode"
		fi
		line "$round" "$mode" "${put[$mode]%.*}" "${range[$mode]%.*}" "$put_ratio" "$range_ratio" "${load[$mode]}"
	done
done
echo
echo "ratio to off of the same round, median (min-max); 1.000 = no cost, 0.970 = 3% fewer requests/s:"
for mode in "${modes[@]:1}"; do
	printf '%-10s put %s   range l %s\n' "$mode" "$(summary "$work/put-$mode")" "$(summary "$work/range-$mode")"
done
echo "$((SECONDS - start)) s; load average now $(cut -d' ' -f1-3 /proc/loadavg)"
