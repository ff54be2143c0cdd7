#!/usr/bin/env bash
# Memory and CPU under the KV benchmark, Cairn against etcd in one run: a 3-member etcd v3.7.3, then a default
# `cairn up` at each GC_PERCENTS value (GOGC for every child: what --gc-percent costs in memory and buys in
# CPU). Each stack takes `cairn bench put` from 1000 clients (etcd's benchmark shape: --conns 100, 8-byte keys,
# 256-byte values, TOTAL requests) and then a linearizable `range` from 1000 clients; a sampler reads the total
# RSS and PSS of the stack's processes every second. Per stack and benchmark it prints requests/s, CPU
# microseconds per request (all the stack's processes, from /proc), and the peak RSS and PSS while it ran; then
# RSS and PSS SETTLE seconds after the load stopped. It also prints the Go collector's cycles per 1000 requests
# (summed over the stack's processes, etcd's too) and the CPU microseconds per request the collector took by the
# runtime's estimate (Cairn's processes only: what a GC setting costs, read apart from the noise of a shared
# machine's total CPU). Compare by PSS: the sum of RSS counts the cairn binary's
# shared pages once per process (see lib/procstat.sh).
#
# GC_SETTINGS lists the Cairn stacks to run, one word each: "default" (cairn up's defaults: --gc-percent 400 and
# --child-memory-limit-mib), GOGC ("100", with the default limit), or GOGC/LIMIT: a number is cairn up's
# --child-memory-limit-mib ("400/48", tuned by internal/gctune), a GOMEMLIMIT value ("400/24MiB", the runtime's
# fixed limit) or "off" ("400/off": no limit, as before the limit existed) goes into every child's environment.
# GC_PERCENTS is the older form, GOGC values only. A word prefixed "alt:" ("alt:default", "alt:400/32") runs
# the binary CAIRN_ALT instead of CAIRN, so two builds compare in one run (say, before and after a change).
#
#   scripts/mem-under-load.sh                             # builds bin/cairn; etcd from the user cache dir
#   CAIRN=/path/cairn ETCD=/path/etcd TOTAL=100000 SETTLE=10 GC_SETTINGS="default 400/off 100/off" scripts/mem-under-load.sh
#   CAIRN=/path/after CAIRN_ALT=/path/before GC_SETTINGS="alt:default default alt:400/32 400/32" scripts/mem-under-load.sh
#
# PER_PROCESS=1 adds, under each put row, the peak PSS of each kind of process (the sum over its instances of
# each one's own peak while the puts ran): which processes hold the stack's memory.
#
# On a shared machine the rates and CPU move with the load: the 1-minute load average is printed with each row.
set -euo pipefail
cd "$(dirname "$0")/.."
TOTAL=${TOTAL:-100000}
SETTLE=${SETTLE:-10}
GC_SETTINGS=${GC_SETTINGS:-${GC_PERCENTS:-default 400/off 100/off}}
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset), ETCD and ETCDCTL
# shellcheck source=lib/procstat.sh
source scripts/lib/procstat.sh
sampler=""
trap '[[ -n "$sampler" ]] && kill "$sampler" 2>/dev/null; bench_cleanup; rm -rf "$work"' EXIT
ticks=$(getconf CLK_TCK)

# sample FILE PID...: appends "RSS-KiB PSS-KiB" of the pids to FILE every second until killed.
sample() {
	local file=$1
	shift
	while true; do
		echo "$(rss_kib "$@") $(pss_kib "$@")" >>"$file"
		sleep 1
	done
}

# sample_each FILE PID...: appends "PID PSS-KiB" of every pid to FILE every second until killed.
sample_each() {
	local file=$1 pid
	shift
	while true; do
		for pid in "$@"; do
			echo "$pid $(pss_kib "$pid")" >>"$file"
		done
		sleep 1
	done
}

# kind PID: what a process of a stack is: cairn's subcommand (frontend, storage, up...) or the program's name.
kind() {
	local argv
	mapfile -d '' -t argv </proc/"$1"/cmdline 2>/dev/null || { echo gone; return; }
	if [[ ${argv[0]##*/} == etcd ]]; then echo etcd; else echo "${argv[1]:-${argv[0]##*/}}"; fi
}

# print_kinds FILE PROCS-FILE: one line per kind of process: instances and the sum of their peak PSS.
print_kinds() {
	local pid
	while read -r pid; do
		echo "$pid $(kind "$pid")"
	done <"$2" | awk 'NR == FNR { if ($2 > peak[$1]) peak[$1] = $2; next }
		{ sum[$2] += peak[$1]; n[$2]++ }
		END { for (k in sum) printf "  %s x%d %.1f MiB;", k, n[k], sum[k] / 1024; print "" }' "$1" -
}

# load NAME ENDPOINTS PROCS-FILE BENCH-ARGS...: one benchmark on the stack whose pids PROCS-FILE lists; prints a
# row.
load() {
	local name=$1 endpoints=$2 procs_file=$3 procs
	mapfile -t procs <"$procs_file"
	shift 3
	local samples=$work/samples cpu0 cpu1 rps gc0 gc1 gccpu=-
	: >"$samples"
	sample "$samples" "${procs[@]}" &
	sampler=$!
	local each=$work/each each_sampler=""
	if [[ ${PER_PROCESS:-} == 1 && $1 == put ]]; then
		: >"$each"
		sample_each "$each" "${procs[@]}" &
		each_sampler=$!
	fi
	read -r -a gc0 < <(gc_stats "${procs[@]}")
	cpu0=$(cpu_ticks "${procs[@]}")
	rps=$(rate "$endpoints" "" --conns 100 --clients 1000 --total "$TOTAL" "$@") || true # a failed run prints "failed"
	cpu1=$(cpu_ticks "${procs[@]}")
	read -r -a gc1 < <(gc_stats "${procs[@]}")
	kill "$sampler"
	wait "$sampler" 2>/dev/null || true
	sampler=""
	if [[ -n $each_sampler ]]; then
		kill "$each_sampler"
		wait "$each_sampler" 2>/dev/null || true
	fi
	if [[ ${gc0[1]} != - && ${gc1[1]} != - ]]; then
		gccpu=$(printf '%.1f' "$(echo "(${gc1[1]} - ${gc0[1]}) / $TOTAL * 1000000" | bc -l)")
	fi
	printf '%-20s %-8s %10s %12.1f %8.1f %12s %14d %14d %8s\n' "$name" "$1" "${rps:-failed}" \
		"$(echo "($cpu1 - $cpu0) / $ticks / $TOTAL * 1000000" | bc -l)" \
		"$(echo "(${gc1[0]} - ${gc0[0]}) * 1000 / $TOTAL" | bc -l)" "$gccpu" \
		"$(($(sort -n -k1 "$samples" | tail -1 | cut -d' ' -f1) / 1024))" \
		"$(($(sort -n -k2 "$samples" | tail -1 | cut -d' ' -f2) / 1024))" "$(cut -d' ' -f1 /proc/loadavg)"
	if [[ -n $each_sampler ]]; then
		print_kinds "$each" "$procs_file"
	fi
}

# measure NAME ENDPOINTS PID...: both benchmarks, then the memory after SETTLE seconds.
measure() {
	local name=$1 endpoints=$2
	shift 2
	tree_pids "$@" >"$work/procs"
	"$CAIRN" bench --endpoints "$endpoints" --total 100 put >/dev/null 2>&1 || true # warm-up
	load "$name" "$endpoints" "$work/procs" put --key-size 8 --val-size 256
	load "$name" "$endpoints" "$work/procs" range foo --consistency l
	sleep "$SETTLE"
	local procs
	mapfile -t procs <"$work/procs"
	printf '%-20s %-8s %10s %12s %8s %12s %14d %14d %8s\n' "$name" "after" "" "" "" "" "$(($(rss_kib "${procs[@]}") / 1024))" \
		"$(($(pss_kib "${procs[@]}") / 1024))" "$(cut -d' ' -f1 /proc/loadavg)"
}

echo "1000 clients, $TOTAL requests per benchmark; $(nproc) cores; 'after': ${SETTLE}s after the load"
printf '%-20s %-8s %10s %12s %8s %12s %14s %14s %8s\n' "stack" "bench" "requests/s" "CPU us/req" "GC/kreq" "GC CPU us/req" \
	"peak RSS MiB" "peak PSS MiB" "load"
etcd_start etcd-load http "$(etcd_base)"
measure "etcd 3 members" "$endpoints" "${pids[@]: -3}"
stop_etcd
run=0
main_cairn=$CAIRN
for setting in $GC_SETTINGS; do
	run=$((run + 1)) # a setting given twice gets a fresh data dir each time
	gc="" limit="" flags=() name="cairn up" prefix="" stack_cairn=$main_cairn
	if [[ $setting == alt:* ]]; then # the stack runs CAIRN_ALT; the benchmark client stays CAIRN's
		stack_cairn=${CAIRN_ALT:?alt: settings need CAIRN_ALT} setting=${setting#alt:} prefix="alt "
	fi
	if [[ $setting != default ]]; then
		gc=${setting%%/*} name="cairn GOGC=$gc"
		if [[ $setting == */* ]]; then
			name="cairn GOGC=$setting"
			limit=${setting#*/}
			if [[ $limit =~ ^[0-9]+$ ]]; then
				flags=(--child-memory-limit-mib "$limit") limit=""
			fi
		fi
	fi
	# An empty GOGC leaves the children to --gc-percent, an empty GOMEMLIMIT to --child-memory-limit-mib.
	CAIRN=$stack_cairn GOGC=$gc GOMEMLIMIT=$limit up_start "up$run-${setting//\//-}" "${flags[@]}"
	measure "$prefix$name" "$endpoints" "${pids[-1]}"
	stop_last
done
