#!/usr/bin/env bash
# Bytes allocated per request by each role of a default `cairn up --enable-pprof` under the KV benchmark's put
# (1000 clients, 100 connections, 8-byte keys, 256-byte values, TOTAL requests): after the run, every child's
# heap profile is read and its alloc_space total (every byte the process allocated since it started, sampled
# every 512 KiB) summed per role and divided by TOTAL. Allocation, unlike time, does not move with the machine's
# load, so two builds compare on a shared machine: with CAIRN_ALT set, each round runs CAIRN_ALT's stack first,
# then CAIRN's (the benchmark client is CAIRN's both times). Needs curl and the Go toolchain (go tool pprof).
#
#   scripts/alloc-per-request.sh                                    # builds bin/cairn
#   CAIRN=/path/after CAIRN_ALT=/path/before ROUNDS=3 TOTAL=30000 scripts/alloc-per-request.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TOTAL=${TOTAL:-30000}
ROUNDS=${ROUNDS:-2}
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset)
# shellcheck source=lib/procstat.sh
source scripts/lib/procstat.sh
trap 'bench_cleanup; rm -rf "$work"' EXIT

# allocated BINARY PROFILE: the bytes the profile's process allocated.
allocated() {
	go tool pprof -sample_index=alloc_space -unit=B -top -nodecount=1 "$1" "$2" 2>/dev/null |
		sed -n 's/.* of \([0-9]*\)B total.*/\1/p'
}

# measure LABEL BINARY: one stack's bytes per request by role.
measure() {
	local label=$1 binary=$2
	CAIRN=$binary up_start "up-$label-$round" --enable-pprof
	local procs p name url
	mapfile -t procs < <(tree_pids "${pids[-1]}")
	"$CAIRN" bench --endpoints "$endpoints" --conns 100 --clients 1000 --total "$TOTAL" put --key-size 8 \
		--val-size 256 >/dev/null 2>&1
	declare -A bytes=()
	for p in "${procs[@]}"; do
		name=$(tr '\0' '\n' <"/proc/$p/cmdline" | sed -n 2p)
		url=$(tr '\0' '\n' <"/proc/$p/cmdline" | grep -A1 -E '^--listen-metrics-urls' | tail -1 || true)
		[[ -n $url && $url != --* ]] || continue
		curl -sf "${url%/}/debug/pprof/heap" >"$work/$name-$p.heap" || continue
		bytes[$name]=$((${bytes[$name]:-0} + $(allocated "$binary" "$work/$name-$p.heap")))
	done
	local load
	load=$(cut -d' ' -f1 /proc/loadavg)
	for name in $(printf '%s\n' "${!bytes[@]}" | sort); do
		printf '%-6s %-10s %-12s %12d %8s\n' "$round" "$label" "$name" $((bytes[$name] / TOTAL)) "$load"
	done
	stop_last
}

echo "bytes allocated per put, by role (all processes of the role together); $TOTAL puts, $(nproc) cores"
printf '%-6s %-10s %-12s %12s %8s\n' round stack role bytes/put load
for round in $(seq "$ROUNDS"); do
	if [[ -n ${CAIRN_ALT:-} ]]; then
		measure alt "$CAIRN_ALT"
	fi
	measure cairn "$CAIRN"
done
