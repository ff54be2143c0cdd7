# What processes cost, from /proc (Linux): CPU ticks, RSS and PSS of a process tree. Source it; used by idle.sh,
# mem-under-load.sh and bench-watch.sh.
#
# RSS counts every page a process has resident, so the sum over processes counts the pages they share (the
# cairn binary's text, about 24 MiB per Cairn process) once per process; PSS divides each shared page among the
# processes that map it, so the sum of PSS is what the processes together hold in memory.

# tree_pids PID...: the pids and all their descendants.
tree_pids() {
	local pid
	for pid in "$@"; do
		echo "$pid"
		local kids
		kids=$(cat /proc/"$pid"/task/*/children 2>/dev/null || true)
		if [[ -n "$kids" ]]; then
			# shellcheck disable=SC2086
			tree_pids $kids
		fi
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

# wakeups PID...: voluntary context switches of every thread of the pids. A thread switches voluntarily each
# time it sleeps (on a timer, a futex, a socket), so over an idle window the count is how often the process woke.
wakeups() {
	local pid total=0 n
	for pid in "$@"; do
		n=$(cat /proc/"$pid"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches:/ {s += $2} END {print s + 0}')
		total=$((total + n))
	done
	echo "$total"
}

# gc_stats PID...: "CYCLES CPU-SECONDS", the Go collector's cycles and its CPU (the runtime's estimate, which
# Cairn exports as go_cpu_classes_gc_total_cpu_seconds_total) summed over those of the pids that serve
# /metrics (their --listen-metrics-urls); CPU-SECONDS is "-" when none exports it (etcd).
gc_stats() {
	local pid url cycles=0 cpu="" metrics
	for pid in "$@"; do
		url=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -A1 -x -- '--listen-metrics-urls' | tail -1) || continue
		[[ -n "$url" ]] || continue
		metrics=$(curl -s --max-time 5 "${url%%,*}/metrics") || continue
		read -r cycles cpu < <(awk -v c="$cycles" -v s="${cpu:-}" '
			/^go_gc_duration_seconds_count / { c += $2 }
			/^go_cpu_classes_gc_total_cpu_seconds_total / { s += $2 }
			END { printf "%d %s\n", c, (s == "" ? "-" : sprintf("%.6f", s)) }' <<<"$metrics")
		[[ $cpu == - ]] && cpu=""
	done
	echo "$cycles ${cpu:--}"
}
