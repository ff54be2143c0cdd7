#!/usr/bin/env bash
# What an idle cluster costs, Cairn against etcd in one run: a 3-member etcd v3.7.3 and a default `cairn up`
# (3 members, 2 hubs, 3 frontends, 2 keepers), each left alone for SETTLE seconds and then watched for WINDOW
# seconds with no client: raft index growth (etcdctl endpoint status), CPU seconds of all its processes
# (utime+stime from /proc) and, at the end, their total RSS and PSS (RSS counts the pages of the binary that the
# processes share once per process; PSS splits them among the processes). Then the same `cairn up` at each GC_PERCENTS value
# (GOGC for every child).
#
#   scripts/idle.sh                                       # builds bin/cairn; etcd from the user cache dir
#   CAIRN=/path/cairn ETCD=/path/etcd WINDOW=30 SETTLE=10 GC_PERCENTS="100 400" scripts/idle.sh
#
# On a shared machine the CPU column moves with the load: the 1-minute load average is printed with each row.
set -euo pipefail
cd "$(dirname "$0")/.."
WINDOW=${WINDOW:-30}
SETTLE=${SETTLE:-10}
GC_PERCENTS=${GC_PERCENTS:-400 100}
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset), ETCD and ETCDCTL
trap 'bench_cleanup; rm -rf "$work"' EXIT
ticks=$(getconf CLK_TCK)

# tree_pids PID...: the pids and all their descendants.
tree_pids() {
	local pid
	for pid in "$@"; do
		echo "$pid"
		local kids
		kids=$(cat /proc/"$pid"/task/*/children 2>/dev/null || true)
		# shellcheck disable=SC2086
		[[ -n "$kids" ]] && tree_pids $kids
	done
}

# cpu_ticks PID...: utime+stime of the pids, in clock ticks (fields 14 and 15 of /proc/PID/stat, after the
# command name, which may hold spaces).
cpu_ticks() {
	local pid total=0 stat rest
	for pid in "$@"; do
		stat=$(cat /proc/"$pid"/stat 2>/dev/null) || continue
		rest=${stat##*) }
		read -r -a f <<<"$rest"
		total=$((total + f[11] + f[12]))
	done
	echo "$total"
}

# rss_kib PID...: total VmRSS of the pids.
rss_kib() {
	local pid total=0 kib
	for pid in "$@"; do
		kib=$(awk '/^VmRSS:/ {print $2}' /proc/"$pid"/status 2>/dev/null) || continue
		total=$((total + ${kib:-0}))
	done
	echo "$total"
}

# pss_kib PID...: total Pss of the pids.
pss_kib() {
	local pid total=0 kib
	for pid in "$@"; do
		kib=$(awk '/^Pss:/ {print $2}' /proc/"$pid"/smaps_rollup 2>/dev/null) || continue
		total=$((total + ${kib:-0}))
	done
	echo "$total"
}

# raft_index ENDPOINT: the member's raft index.
raft_index() {
	"$ETCDCTL" --endpoints "$1" endpoint status -w json | jq '.[0].Status.raftIndex'
}

# measure NAME ENDPOINT PID...: settles, then prints one row over WINDOW seconds.
measure() {
	local name=$1 endpoint=$2
	shift 2
	sleep "$SETTLE"
	local procs
	mapfile -t procs < <(tree_pids "$@")
	local index0 cpu0 index1 cpu1
	index0=$(raft_index "$endpoint")
	cpu0=$(cpu_ticks "${procs[@]}")
	sleep "$WINDOW"
	index1=$(raft_index "$endpoint")
	cpu1=$(cpu_ticks "${procs[@]}")
	printf '%-24s %6d %14d %14.2f %10d %10d %8s\n' "$name" "${#procs[@]}" "$((index1 - index0))" \
		"$(echo "($cpu1 - $cpu0) / $ticks" | bc -l)" "$(($(rss_kib "${procs[@]}") / 1024))" \
		"$(($(pss_kib "${procs[@]}") / 1024))" "$(cut -d' ' -f1 /proc/loadavg)"
}

echo "idle for ${WINDOW}s after ${SETTLE}s to settle; $(nproc) cores"
printf '%-24s %6s %14s %14s %10s %10s %8s\n' "stack" "procs" "raft entries" "CPU seconds" "RSS MiB" "PSS MiB" "load"
etcd_start etcd-idle http $((20000 + RANDOM % 400 * 100)) # a random base: fixed ports collide on a shared machine
measure "etcd 3 members" "${endpoints%%,*}" "${pids[@]: -3}"
stop_etcd
for gc in $GC_PERCENTS; do
	GOGC=$gc up_start "up-gc$gc"
	measure "cairn up GOGC=$gc" "${endpoints%%,*}" "${pids[-1]}"
	stop_last
done
