#!/usr/bin/env bash
# Bytes allocated per put by each process of a default `cairn up` under the KV benchmark's put (1000 clients,
# 100 connections, 8-byte keys, 256-byte values, TOTAL puts): what the garbage collector has to pay for, per
# request, in each role. Each child runs with --enable-pprof; after the load, its heap profile's alloc_space
# (every byte allocated since it started, sampled every 512 KiB) is divided by TOTAL. A consensus child is marked
# leader or follower by etcd_server_is_leader. The profile's sampling makes a single run's figure move by a few
# percent: compare totals over RUNS runs, and two builds in one run (CAIRN_ALT, say the build before a change).
#
#   scripts/alloc-per-put.sh                                     # builds bin/cairn
#   CAIRN=/path/after CAIRN_ALT=/path/before TOTAL=30000 RUNS=2 scripts/alloc-per-put.sh
#
# Output: one row per run, binary and process: the build (cairn or alt), the process (name and role), MB
# allocated and bytes per put; and the requests/s of each run, with the 1-minute load average.
set -euo pipefail
cd "$(dirname "$0")/.."
TOTAL=${TOTAL:-30000}
RUNS=${RUNS:-1}
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset)
# shellcheck source=lib/procstat.sh
source scripts/lib/procstat.sh
trap 'bench_cleanup; rm -rf "$work"' EXIT

# flag_value PID FLAG: the value of FLAG on the process's command line.
flag_value() {
	tr '\0' '\n' <"/proc/$1/cmdline" | grep -A1 -x -e "$2" | tail -1
}

# measure BUILD BINARY RUN: one `cairn up`, one put benchmark, one row per profiled process.
measure() {
	local build=$1 binary=$2 run=$3
	local saved=$CAIRN
	CAIRN=$binary
	up_start "$build-$run" --enable-pprof
	local procs
	mapfile -t procs < <(tree_pids "${pids[-1]}")
	local rate
	rate=$("$CAIRN" bench --endpoints "$endpoints" --conns 100 --clients 1000 --total "$TOTAL" put --key-size 8 \
		--val-size 256 2>&1 | awk '/Requests\/sec/ {print $2}')
	printf '%-5s run %d: %s puts/s, load %s\n' "$build" "$run" "$rate" "$(cut -d' ' -f1 /proc/loadavg)"
	local p
	for p in "${procs[@]}"; do
		local name metrics role=""
		name=$(tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | sed -n 2p) || continue
		metrics=$(flag_value "$p" --listen-metrics-urls) || continue
		[[ -n $metrics && $metrics != --* ]] || continue
		metrics=${metrics%%,*}
		metrics=${metrics%/}
		if [[ $name == consensus ]]; then
			role=follower
			# grep reads to the end (no -q): a curl cut off by SIGPIPE would fail the pipeline under pipefail
			if curl -s "$metrics/metrics" | grep -x 'etcd_server_is_leader 1' >/dev/null; then
				role=leader
			fi
		fi
		curl -s "$metrics/debug/pprof/heap" >"$work/heap"
		local bytes
		bytes=$(go tool pprof -unit=B -sample_index=alloc_space -top "$binary" "$work/heap" 2>/dev/null |
			grep -o 'of [0-9]*B total' | tr -dc 0-9)
		printf '%-5s run %d  %-10s %-8s %8.1f MB %8d B/put\n' "$build" "$run" "$name" "$role" \
			"$(echo "$bytes / 1048576" | bc -l)" "$((bytes / TOTAL))"
	done
	bench_cleanup
	pids=()
	CAIRN=$saved
}

for run in $(seq "$RUNS"); do
	[[ -n ${CAIRN_ALT:-} ]] && measure alt "$CAIRN_ALT" "$run"
	measure cairn "$CAIRN" "$run"
done
