#!/usr/bin/env bash
# Two builds' idle cost in the same window: a default `cairn up` of CAIRN and one of BEFORE run side by side, are
# left alone for SETTLE seconds and then watched together for WINDOW seconds with no client: the CPU seconds of
# all processes of each stack, their wakeups a second (voluntary context switches of their threads, see
# lib/procstat.sh), and the stack's PSS sampled every 10 s through the window: the highest and the last. An
# idle process's heap settles only over minutes (its first paced collection, Go's forced one every 2 min):
# SETTLE=180 WINDOW=120 shows where it settles. idle.sh measures one stack after another, so its CPU figures come from different windows, and
# on a shared or virtual machine the CPU of the same wakeups moves twofold from one window to the next; here both
# stacks share each window. ROUNDS rounds, the start order swapped each round. BEFORE=etcd compares with a
# 3-member etcd v3.7.3 (defaults) instead: the issue's "idle CPU no more than etcd's", measured in one window.
#
#   CAIRN=/tmp/after/cairn BEFORE=/tmp/before/cairn scripts/idle-ab.sh
#   CAIRN=/tmp/after/cairn BEFORE=etcd ROUNDS=4 scripts/idle-ab.sh
#   CAIRN=... BEFORE=... ROUNDS=4 WINDOW=60 UP_FLAGS="--child-memory-limit-mib 32" scripts/idle-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WINDOW=${WINDOW:-30}
SETTLE=${SETTLE:-15}
ROUNDS=${ROUNDS:-2}
: "${BEFORE:?set BEFORE to the cairn binary to compare CAIRN with}"
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset)
# shellcheck source=lib/procstat.sh
source scripts/lib/procstat.sh
trap 'bench_cleanup; rm -rf "$work"' EXIT
ticks=$(getconf CLK_TCK)
after=$CAIRN

# row NAME CPU0 CPU1 WOKE0 WOKE1 PSS-PEAK-KIB PSS-LAST-KIB: one stack's line.
row() {
	printf '%-10s %14.2f %12d %14d %14d\n' "$1" "$(echo "($3 - $2) / $ticks * 30 / $WINDOW" | bc -l)" \
		"$((($5 - $4) / WINDOW))" "$(($6 / 1024))" "$(($7 / 1024))"
}

echo "side by side, idle for ${WINDOW}s after ${SETTLE}s to settle; $(nproc) cores"
printf '%-10s %14s %12s %14s %14s\n' "stack" "CPU s per 30s" "wakeups/s" "peak PSS MiB" "last PSS MiB"
for ((round = 1; round <= ROUNDS; round++)); do
	order=(after before)
	((round % 2 == 1)) || order=(before after)
	declare -A top=()
	started=${#pids[@]}
	for name in "${order[@]}"; do
		if [[ $name == before && $BEFORE == etcd ]]; then
			etcd_start "etcd-$round" http "$(etcd_base)"
			top[$name]="${pids[*]: -3}"
			continue
		fi
		bin=$after
		[[ $name == before ]] && bin=$BEFORE
		# shellcheck disable=SC2086 # UP_FLAGS is a list of words
		CAIRN=$bin up_start "$name-$round" ${UP_FLAGS:-}
		top[$name]=${pids[-1]}
	done
	sleep "$SETTLE"
	# shellcheck disable=SC2086 # a stack's top pids are a list of words
	mapfile -t after_pids < <(tree_pids ${top[after]})
	# shellcheck disable=SC2086
	mapfile -t before_pids < <(tree_pids ${top[before]})
	cpu_a0=$(cpu_ticks "${after_pids[@]}") cpu_b0=$(cpu_ticks "${before_pids[@]}")
	woke_a0=$(wakeups "${after_pids[@]}") woke_b0=$(wakeups "${before_pids[@]}")
	peak_a=0 peak_b=0
	for ((waited = 0; waited < WINDOW; waited += step)); do
		step=$((WINDOW - waited < 10 ? WINDOW - waited : 10))
		sleep "$step"
		pss_a=$(pss_kib "${after_pids[@]}") pss_b=$(pss_kib "${before_pids[@]}")
		peak_a=$((pss_a > peak_a ? pss_a : peak_a)) peak_b=$((pss_b > peak_b ? pss_b : peak_b))
	done
	cpu_a1=$(cpu_ticks "${after_pids[@]}") cpu_b1=$(cpu_ticks "${before_pids[@]}")
	woke_a1=$(wakeups "${after_pids[@]}") woke_b1=$(wakeups "${before_pids[@]}")
	row "CAIRN" "$cpu_a0" "$cpu_a1" "$woke_a0" "$woke_a1" "$peak_a" "$pss_a"
	row "$([[ $BEFORE == etcd ]] && echo etcd || echo BEFORE)" "$cpu_b0" "$cpu_b1" "$woke_b0" "$woke_b1" "$peak_b" "$pss_b"
	echo "round $round, load $(cut -d' ' -f1 /proc/loadavg)"
	while ((${#pids[@]} > started)); do stop_last; done
done
