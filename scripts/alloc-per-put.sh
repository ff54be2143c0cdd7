#!/usr/bin/env bash
# Bytes allocated per put, per process of a default `cairn up`, under etcd's put benchmark (1000 clients,
# --conns 100, 8-byte keys, 256-byte values, TOTAL puts): what the garbage collector has to collect, read apart
# from the noise of a shared machine's CPU. Each round starts `cairn up --enable-pprof`, runs the puts, then reads
# every child's heap profile (/debug/pprof/heap: alloc_space since the child started, sampled every 512 KiB, so
# compare several rounds) and its goroutine count, all at once, and prints per process: role, bytes allocated per put,
# goroutines right after the load. The leader's storage is the one that allocates most (it also decodes the
# frontends' requests and proposes them). Needs the go tool (go tool pprof).
#
# ROUNDS rounds (default 2) run CAIRN; with CAIRN_ALT set, each round runs CAIRN_ALT first, then CAIRN (say,
# before and after a change, in turns on the same machine).
#
#   CAIRN=/path/after CAIRN_ALT=/path/before TOTAL=30000 ROUNDS=3 scripts/alloc-per-put.sh
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

# run_round LABEL ROUND BINARY: one stack, its puts, and a row per child.
run_round() {
	local label=$1 round=$2 bin=$3
	local CAIRN=$bin
	rm -rf "${work:?}/up"
	up_start up --enable-pprof
	local procs p name url heap bytes
	mapfile -t procs < <(tree_pids "${pids[-1]}")
	"$CAIRN" bench --endpoints "$endpoints" --conns 100 --clients 1000 --total "$TOTAL" put --key-size 8 \
		--val-size 256 >/dev/null 2>&1
	# First every child's profiles, at once (an idle link worker exits after 5 s), then the sums.
	for p in "${procs[@]}"; do
		name=$(tr '\0' '\n' </proc/"$p"/cmdline | sed -n 2p)
		url=$(tr '\0' '\n' </proc/"$p"/cmdline | grep -A1 -E '^--listen-metrics-urls' | tail -1 || true)
		[[ -n $url && $url != --* ]] || continue
		curl -s "${url%/}/debug/pprof/goroutine?debug=1" | sed -n 's/^goroutine profile: total //p' >"$work/$name-$p.gor"
		curl -s "${url%/}/debug/pprof/heap" >"$work/$name-$p.heap"
	done
	for heap in "$work"/*.heap; do
		p=${heap##*-}
		p=${p%.heap}
		name=$(basename "${heap%-*}")
		# the raw profile's samples: alloc_objects alloc_space inuse_objects inuse_space: locations
		bytes=$(go tool pprof -raw "$heap" 2>/dev/null | awk '/^ *[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+:/ {t += $2} END {print t + 0}')
		printf '%-7s %5s  %-12s %6d  %10d  %s\n' "$label" "$round" "$name" "$p" "$((bytes / TOTAL))" "$(cat "${heap%.heap}.gor")"
	done | sort -k3,3 -k5,5nr
	rm -f "$work"/*.heap "$work"/*.gor
	stop_last
	echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

printf '%-7s %5s  %-12s %6s  %10s  %s\n' build round process pid "B/put" goroutines
for round in $(seq "$ROUNDS"); do
	if [[ -n "${CAIRN_ALT:-}" ]]; then
		run_round alt "$round" "$CAIRN_ALT"
	fi
	run_round main "$round" "$CAIRN"
done
