#!/usr/bin/env bash
# Watch fan-out side by side with a 3-member etcd v3.7.3, the shapes of issue 23: every watcher on one key,
# puts of 32 bytes at a fixed rate from `cairn bench watch` (3 clients on 3 connections), against
#   etcd          the 3-member etcd, defaults;
#   1 hub         watchhub-1 of a default `cairn up`, streams opened on it directly;
#   2 hubs        both watchhubs, directly;
#   frontends     the frontends of the same `cairn up` (the default path: relayed to the hubs).
# The etcd and frontends rows' streams share the bench's 3 connections, one per member or frontend; the hub rows
# open WATCH_CONNS connections to each hub (default 1: the issue's table). Each connection is one writer goroutine
# at the server and one reader at the client, both serial, so one connection can cap a hub whatever its cores.
# Shapes (SCALE multiplies the streams; 1 is the issue's size, for a 16-core machine):
#   100,000 watchers (1,000 streams × 100), 10 puts/s;  20,000 watchers (200 streams × 100), 200 puts/s.
# Prints events/s, p50/p99 event latency (put issued → event received), events received of expected, watchers
# the server canceled (a hub sheds those more than --max-watch-lag behind; their later events are not waited
# for), and events per CPU-second of the servers that deliver them (the hubs used, plus the frontends that relay; etcd's three
# members), CPU from /proc; for the frontends row also per CPU-second of the hubs alone, and the frontends' share;
# and the peak of those servers' summed RSS during the run (sampled every 0.5 s). The rows of one `cairn up` run
# on the same hubs (1 hub, 2 hubs, frontends), so a later row's RSS starts from what the earlier rows left the
# hubs holding; run TARGETS="1hub" alone for a hub's own peak.
#
#   SCALE=0.1 scripts/bench-watch.sh                      # builds bin/cairn; fits a 2-core machine
#   CAIRN=/path/cairn ETCD=/path/etcd SCALE=1 PUT_SECONDS=20 ROUNDS=2 UP_FLAGS="--child-gomaxprocs 16" scripts/bench-watch.sh
#   TARGETS="1hub" scripts/bench-watch.sh                 # only some rows: etcd 1hub 2hubs frontends
#
# On a shared machine the figures move with the load: the 1-minute load average is printed with each row.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${SCALE:-1}
PUT_SECONDS=${PUT_SECONDS:-20}
ROUNDS=${ROUNDS:-1}
UP_FLAGS=${UP_FLAGS:-}
SHAPES=${SHAPES:-"1000x100@10 200x100@200"} # streams x watchers-per-stream @ puts per second
WATCH_CONNS=${WATCH_CONNS:-1}                 # client connections to each hub (the 1 hub and 2 hubs rows)
TARGETS=" ${TARGETS:-etcd 1hub 2hubs frontends} "
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset), ETCD and ETCDCTL
# shellcheck source=lib/procstat.sh
source scripts/lib/procstat.sh # cpu_ticks
trap 'bench_cleanup; rm -rf "$work"' EXIT
ticks=$(getconf CLK_TCK 2>/dev/null || echo 100)

line() { printf '%-10s %-26s %11s %9s %9s %19s %9s %13s %13s %7s %9s %6s\n' "$@"; }

# measure TARGET SHAPE ENDPOINTS WATCH-ENDPOINTS RELAY-PIDS PID...: one `cairn bench watch` run, one row. PID...
# are the servers that deliver the events; RELAY-PIDS (space-separated, may be empty) the frontends relaying them,
# whose CPU is counted too (events/CPU-s), and apart (hubs ev/CPU-s: the PIDs alone; relay%: their share).
measure() {
	local target=$1 shape=$2 endpoints=$3 watch=$4
	local -a relay
	read -r -a relay <<<"$5"
	shift 5
	local streams=${shape%%x*} rest=${shape#*x}
	local per=${rest%@*} rate=${shape#*@}
	streams=$(awk -v s="$streams" -v k="$SCALE" 'BEGIN { n = int(s * k + 0.5); print (n < 1 ? 1 : n) }')
	local args=(bench --endpoints "$endpoints" --conns 3 --clients 3 --total $((rate * PUT_SECONDS)) --rate "$rate"
		watch --streams "$streams" --watch-per-stream "$per" --val-size 32)
	[[ -n $watch ]] && args+=(--watch-endpoints "$watch" --watch-conns "$WATCH_CONNS")
	local before relay_before out
	before=$(cpu_ticks "$@") relay_before=$(cpu_ticks "${relay[@]}")
	local peak_file sampler
	peak_file=$(mktemp)
	(
		peak=0
		while :; do
			r=$(rss_kib "$@" "${relay[@]}")
			if ((r > peak)); then peak=$r && echo "$peak" >"$peak_file"; fi
			sleep 0.5
		done
	) &
	sampler=$!
	out=$("$CAIRN" "${args[@]}" 2>&1) || true
	kill "$sampler" 2>/dev/null
	wait "$sampler" 2>/dev/null || true # killed: 143
	local peak_mib
	peak_mib=$(awk '{printf "%.0f", $1 / 1024}' "$peak_file")
	rm -f "$peak_file"
	local cpu=$(($(cpu_ticks "$@") - before)) relay_cpu=$(($(cpu_ticks "${relay[@]}") - relay_before))
	local eps p50 p99 got want
	eps=$(awk '/events\/sec/ {for (i = 1; i <= NF; i++) if ($i == "events/sec.") print $(i-1)}' <<<"$out")
	p50=$(awk '/ 50% in/ {print $3}' <<<"$out")
	p99=$(awk '/ 99% in/ {print $3}' <<<"$out")
	read -r got want < <(awk '/Events:/ {print $2, $4}' <<<"$out")
	local canceled
	canceled=$(awk '/Canceled:/ {print $2}' <<<"$out")
	local per_cpu hub_cpu=- share=-
	per_cpu=$(awk -v e="${got:-0}" -v c="$((cpu + relay_cpu))" -v t="$ticks" 'BEGIN { printf "%.0f", (c > 0 ? e * t / c : 0) }')
	if ((${#relay[@]} > 0)); then
		hub_cpu=$(awk -v e="${got:-0}" -v c="$cpu" -v t="$ticks" 'BEGIN { printf "%.0f", (c > 0 ? e * t / c : 0) }')
		share=$(awk -v r="$relay_cpu" -v c="$((cpu + relay_cpu))" 'BEGIN { printf "%.0f%%", (c > 0 ? 100 * r / c : 0) }')
	fi
	line "$target" "$((streams * per)) w ($streams×$per) @$rate/s" "${eps:-?}" "${p50:-?}" "${p99:-?}" \
		"${got:-?}/${want:-?}" "${canceled:-0}" "$per_cpu" "$hub_cpu" "$share" "${peak_mib:-?}" "$(cut -d' ' -f1 /proc/loadavg)"
}

echo "SCALE=$SCALE PUT_SECONDS=$PUT_SECONDS; latencies in seconds; events/CPU-s: per CPU-second of the hubs used" \
	"and the frontends relaying (etcd: its 3 members); hubs ev/CPU-s, relay%: the hubs alone, the frontends' share;" \
	"peak RSS MiB: of the same processes, summed"
line target shape events/s p50 p99 received/expected canceled events/CPU-s "hubs ev/CPU-s" relay% "peak RSS" load1
for round in $(seq "$ROUNDS"); do
	if [[ $TARGETS == *" etcd "* ]]; then
		etcd_start "etcd-$round" http "$(etcd_base)"
		etcd_pids=("${pids[@]: -3}")
		for shape in $SHAPES; do measure etcd "$shape" "$endpoints" "" "" "${etcd_pids[@]}"; done
		stop_etcd
	fi

	# shellcheck disable=SC2086
	up_start up $UP_FLAGS
	hub1=$(up_child api watchhub-1) hub2=$(up_child api watchhub-2)
	pid1=$(up_child pid watchhub-1) pid2=$(up_child pid watchhub-2)
	frontend_pids=$(up_children frontend-)
	for shape in $SHAPES; do
		[[ $TARGETS != *" 1hub "* ]] || measure "1 hub" "$shape" "$endpoints" "127.0.0.1:$hub1" "" "$pid1"
		[[ $TARGETS != *" 2hubs "* ]] || measure "2 hubs" "$shape" "$endpoints" "127.0.0.1:$hub1,127.0.0.1:$hub2" "" "$pid1" "$pid2"
		[[ $TARGETS != *" frontends "* ]] || measure frontends "$shape" "$endpoints" "" "$frontend_pids" "$pid1" "$pid2"
	done
	stop_last
	rm -rf "$work/up"
done
