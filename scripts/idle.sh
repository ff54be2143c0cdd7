#!/usr/bin/env bash
# What an idle cluster costs, Cairn against etcd in one run: a 3-member etcd v3.7.3 and a default `cairn up`
# (3 members, 2 hubs, 3 frontends, 2 keepers), each left alone for SETTLE seconds and then watched for WINDOW
# seconds with no client: raft index growth (etcdctl endpoint status), CPU seconds of all its processes
# (utime+stime from /proc) and, at the end, their total RSS and PSS. The sum of RSS counts the pages of the
# binary that the processes share once per process (about 24 MiB per Cairn process); PSS splits them among the
# processes, so its sum is the memory the stack really holds: compare stacks by PSS (see lib/procstat.sh).
# Then the same `cairn up` at each GC_PERCENTS value (GOGC for every child). PER_PROCESS=1 adds a line per
# process (CPU seconds, RSS, PSS, anonymous memory, and wakeups a second: the voluntary context switches of its
# threads, see lib/procstat.sh). Under load: mem-under-load.sh.
#
#   scripts/idle.sh                                       # builds bin/cairn; etcd from the user cache dir
#   CAIRN=/path/cairn ETCD=/path/etcd WINDOW=30 SETTLE=10 GC_PERCENTS="100 400" scripts/idle.sh
#   UP_FLAGS="--child-memory-limit-mib 32" scripts/idle.sh    # more cairn up flags for every Cairn stack
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
# shellcheck source=lib/procstat.sh
source scripts/lib/procstat.sh
trap 'bench_cleanup; rm -rf "$work"' EXIT
ticks=$(getconf CLK_TCK)

# raft_index ENDPOINT: the member's raft index (etcdctl's fields output, so that no JSON tool is needed).
raft_index() {
	"$ETCDCTL" --endpoints "$1" endpoint status -w fields | awk '$1 == "\"RaftIndex\"" {print $3}'
}

# measure NAME ENDPOINT PID...: settles, then prints one row over WINDOW seconds.
measure() {
	local name=$1 endpoint=$2
	shift 2
	sleep "$SETTLE"
	local procs
	mapfile -t procs < <(tree_pids "$@")
	local index0 cpu0 index1 cpu1 pid
	local -A each0 woke0
	index0=$(raft_index "$endpoint")
	cpu0=$(cpu_ticks "${procs[@]}")
	for pid in "${procs[@]}"; do
		each0[$pid]=$(cpu_ticks "$pid")
		woke0[$pid]=$(wakeups "$pid")
	done
	sleep "$WINDOW"
	index1=$(raft_index "$endpoint")
	cpu1=$(cpu_ticks "${procs[@]}")
	printf '%-24s %6d %14d %14.2f %10d %10d %8s\n' "$name" "${#procs[@]}" "$((index1 - index0))" \
		"$(echo "($cpu1 - $cpu0) / $ticks" | bc -l)" "$(($(rss_kib "${procs[@]}") / 1024))" \
		"$(($(pss_kib "${procs[@]}") / 1024))" "$(cut -d' ' -f1 /proc/loadavg)"
	[[ -n "${PER_PROCESS:-}" ]] || return 0
	for pid in "${procs[@]}"; do
		printf '  %-22s %6d %14s %14.2f %10d %10d %8s\n' "$(process_name "$pid")" "$pid" "" \
			"$(echo "($(cpu_ticks "$pid") - ${each0[$pid]}) / $ticks" | bc -l)" "$(($(rss_kib "$pid") / 1024))" \
			"$(($(pss_kib "$pid") / 1024))" "anon $(($(awk '/^Anonymous:/ {print $2}' /proc/"$pid"/smaps_rollup) / 1024)) wakeups/s $((($(wakeups "$pid") - woke0[$pid]) / WINDOW))"
	done
}

# process_name PID: a cairn child's subcommand and --name (etcd's --name), or the command.
process_name() {
	local -a argv
	mapfile -d '' -t argv <"/proc/$1/cmdline"
	local name=${argv[1]:-${argv[0]}} i
	for ((i = 0; i < ${#argv[@]} - 1; i++)); do
		[[ ${argv[i]} == --name ]] && name+=" ${argv[i + 1]}"
	done
	echo "$(basename "${argv[0]}") $name"
}

echo "idle for ${WINDOW}s after ${SETTLE}s to settle; $(nproc) cores"
printf '%-24s %6s %14s %14s %10s %10s %8s\n' "stack" "procs" "raft entries" "CPU seconds" "RSS MiB" "PSS MiB" "load"
etcd_start etcd-idle http "$(etcd_base)"
measure "etcd 3 members" "${endpoints%%,*}" "${pids[@]: -3}"
stop_etcd
for gc in $GC_PERCENTS; do
	# shellcheck disable=SC2086 # UP_FLAGS is a list of words
	GOGC=$gc up_start "up-gc$gc" ${UP_FLAGS:-}
	measure "cairn up GOGC=$gc" "${endpoints%%,*}" "${pids[-1]}"
	stop_last
done
