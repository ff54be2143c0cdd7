#!/usr/bin/env bash
# Watch lag under overload, over time: `cairn up` with one watchhub and --max-watch-lag LAG (each LAG given, in
# turn), `cairn bench watch-latency` straight to the hub with more watchers × puts/s than it can serve, and the
# hub's /metrics every 2 s: mean lag of the watchers served in the interval (cairn_watchhub_watch_lag_seconds),
# events/s, watchers catching up and canceled for lag, the hub's RSS, and the store's revision (whether writes
# kept their rate). Then the bench's own p50/p99 (of the events received) and the load average. VIA=frontends
# sends the watch streams through the stack's frontends (the default path, relayed to the one hub) instead, and
# prints how many watchers the frontends canceled for lag (responses that grew late in the relay's buffers).
#
#   scripts/watch-lag.sh                                               # builds bin/cairn; LAGS="5s 1s"
#   CAIRN=/path/cairn LAGS="5s 1s 1h" STREAMS=200 PER_STREAM=100 PUTS=4000 RATE=200 scripts/watch-lag.sh
#   VIA=frontends LAGS=5s scripts/watch-lag.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STREAMS=${STREAMS:-200} PER_STREAM=${PER_STREAM:-100} PUTS=${PUTS:-4000} RATE=${RATE:-200} VIA=${VIA:-hub}
case $VIA in hub | frontends) ;; *) echo "VIA must be hub or frontends, not $VIA" >&2; exit 2 ;; esac
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset), ETCD and ETCDCTL
trap 'bench_cleanup; rm -rf "$work"' EXIT

# scrape URL PID: one line every 2 s until the bench ends (the caller kills it).
scrape() {
	local url=$1 pid=$2 t0 prev=""
	t0=$(date +%s)
	while true; do
		local now m
		now=$(date +%s)
		m=$(http_get "$url") || true
		local line
		line=$(awk -v t=$((now - t0)) -v rss="$(awk '/VmRSS/ {print int($2/1024)}' "/proc/$pid/status" 2>/dev/null)" '
			/^cairn_watchhub_watch_lag_seconds_sum / {s=$2} /^cairn_watchhub_watch_lag_seconds_count / {c=$2}
			/^etcd_debugging_mvcc_events_total / {e=$2} /^etcd_debugging_mvcc_slow_watcher_total / {slow=$2}
			/^cairn_watchhub_watchers_lag_canceled_total / {cx=$2} /^cairn_watchhub_head_revision / {h=$2}
			END {printf "%d %.6f %.0f %.0f %.0f %.0f %.0f %s\n", t, s, c, e, slow, cx, h, rss}' <<<"$m")
		if [[ -n $prev ]]; then
			awk '{split(p, a, " "); dc=$3-a[3]; dt=$1-a[1]; if (dt<=0) dt=1
				printf "  t=%3ds  mean lag %6.2fs  events/s %8.0f  catching up %6d  lag-canceled %6d  revision %7d  hub RSS %4d MiB\n",
					$1, (dc > 0 ? ($2 - a[2]) / dc : 0), ($4-a[4])/dt, $5, $6, $7, $8}' p="$prev" <<<"$line"
		fi
		prev=$line
		sleep 2
	done
}

for lag in ${LAGS:-5s 1s}; do
	up_start "up-$lag" --watchhubs 1 --max-watch-lag "$lag"
	hub=127.0.0.1:$(up_child api watchhub-1)
	metrics=http://127.0.0.1:$(up_child metrics watchhub-1)/metrics
	hubpid=$(up_child pid watchhub-1)
	via=(--watch-endpoints "$hub")
	[[ $VIA == frontends ]] && via=()
	echo "--max-watch-lag $lag: $((STREAMS * PER_STREAM)) watchers ($STREAMS streams, via the $VIA) on one key, $PUTS puts at $RATE/s; load $(cut -d' ' -f1-3 /proc/loadavg)"
	scrape "$metrics" "$hubpid" &
	scraper=$!
	"$CAIRN" bench --endpoints "$endpoints" --conns 3 --clients 3 watch-latency "${via[@]}" \
		--streams "$STREAMS" --watchers-per-stream "$PER_STREAM" --put-total "$PUTS" --put-rate "$RATE" \
		--event-timeout 20s 2>&1 | grep -E "Events:|Watchers:|Requests/sec|50%|99%|Error" || true
	kill "$scraper" 2>/dev/null || true
	wait "$scraper" 2>/dev/null || true
	if [[ $VIA == frontends ]]; then
		canceled=0
		for ep in ${endpoints//,/ }; do
			n=$(http_get "$ep/metrics" | awk '/^cairn_frontend_watchers_lag_canceled_total / {print $2}') || true
			canceled=$(awk -v a="$canceled" -v b="${n:-0}" 'BEGIN {printf "%.0f", a + b}')
		done
		echo "  canceled for lag by the frontends: $canceled"
	fi
	echo "  load $(cut -d' ' -f1-3 /proc/loadavg)"
	stop_last
done
