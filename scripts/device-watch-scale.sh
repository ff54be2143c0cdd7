#!/usr/bin/env bash
# Issue 23's many-core measurement as one prepared run, for the 16-core device machine: it starts bare (no Go,
# no module proxy, no promise of jq, curl or getconf) and a session has 15 minutes of it in all, so this runs
# everything in one call that ends inside BUDGET seconds. Pack the binaries first, here: scripts/device-pack.sh
# (into .device/), then call the device tool with
#
#   command: scripts/device-watch-scale.sh    carry: [".device"]    timeout_s: 600
#
# Stages (STAGES, default "table cores profile conns"), each skipped with a line saying so when the time left
# is shorter than its estimate:
#   table     the issue's table: scripts/bench-watch.sh beside a 3-member etcd (etcd, 1 hub, 2 hubs, frontends),
#             `cairn up --child-gomaxprocs $TABLE_PROCS` (16)
#   cores     one hub against its cores: scripts/bench-hub-cores.sh, PROCS="$CORE_PROCS" (1 4 16)
#   profile   10 s CPU and mutex profiles of hub-1 at 100,000 watchers straight on it, 10 puts/s,
#             --child-gomaxprocs 16 (hub-cpu.pb.gz, hub-mutex.pb.gz: on 2 cores all of a hub's lock waiting was
#             on gRPC's per-connection control buffer, between the streams' senders and the connection's
#             writer); then the same of frontend-1 with the watchers through the frontends (relay-cpu.pb.gz,
#             relay-mutex.pb.gz: on 2 cores a tenth of a relaying frontend's CPU was the grpc-ecosystem
#             middleware's per-message counter, a label lookup per message, and its lock waiting, as a hub's,
#             was on gRPC's control buffer); and each run's bench client over the whole run (NAME-bench-cpu.pb.gz:
#             is one connection's reader goroutine at the client the limit?)
#   conns     one hub at 4 and 16 cores again, the 100,000-watcher shape, with the streams on 3 connections
#             (WATCH_CONNS=3) instead of 1: in the table and the cores stage a hub's streams share one client
#             connection where etcd's spread over three, and a connection's writer goroutine (server) and reader
#             (client) are serial, so the issue's "one hub does not use its cores" may be one connection's limit
# Everything goes to $OUT (the device tool's folder; ./device-out elsewhere): summary.txt, the profile, and
# logs.tar.gz with each stage's output and every process log of a stage that failed.
#
#   SCALE=0.1 PUT_SECONDS=5 BUDGET=400 scripts/device-watch-scale.sh    # a rehearsal on a 2-core machine
set -uo pipefail
cd "$(dirname "$0")/.."
began=$SECONDS
BUDGET=${BUDGET:-540}
export SCALE=${SCALE:-1} PUT_SECONDS=${PUT_SECONDS:-10} ROUNDS=${ROUNDS:-1}
TABLE_PROCS=${TABLE_PROCS:-16} CORE_PROCS=${CORE_PROCS:-1 4 16} STAGES=" ${STAGES:-table cores profile conns} "
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
bins=$(mktemp -d)
logs=$(mktemp -d)
summary=$out/summary.txt
trap 'tar -czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null; rm -rf "$bins" "$logs"' EXIT

say() { echo "$*" | tee -a "$summary"; }
left() { echo $((BUDGET - (SECONDS - began))); }

for bin in cairn etcd; do
	if [[ ! -f .device/$bin.gz ]]; then
		echo ".device/$bin.gz is missing: run scripts/device-pack.sh first, and carry .device" >&2
		exit 2
	fi
	if command -v gzip >/dev/null; then
		gzip -dc ".device/$bin.gz" >"$bins/$bin"
	else # the device image has python3; gzip is not promised
		python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), sys.stdout.buffer)' ".device/$bin.gz" >"$bins/$bin"
	fi
	chmod +x "$bins/$bin"
done
export CAIRN=$bins/cairn ETCD=$bins/etcd ETCDCTL=$bins/etcd # the benchmarks use no etcdctl
say "# device-watch-scale $(date -u +%FT%TZ): $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)," \
	"kernel $(uname -r); SCALE=$SCALE PUT_SECONDS=$PUT_SECONDS ROUNDS=$ROUNDS BUDGET=${BUDGET}s"
say "# cairn $("$CAIRN" version 2>/dev/null | head -n 1); etcd $("$ETCD" --version 2>/dev/null | head -n 1)"

# Estimates per stage, in seconds: a `cairn bench watch` run is the puts, plus creating the watchers and
# draining (about 10 s at 100,000 watchers), plus a stack's start. Measured at SCALE=0.1 on 2 cores; at SCALE=1
# on 16 cores creating 100,000 watchers took etcd and the hubs 1-3 s.
per_run=$((PUT_SECONDS + 12))
stage() { # NAME ESTIMATE COMMAND...: runs COMMAND unless less than ESTIMATE seconds are left
	local name=$1 estimate=$2 t0=$SECONDS rc
	shift 2
	[[ $STAGES == *" $name "* ]] || return 0
	if (($(left) < estimate)); then
		say "## $name: skipped, $(left) s left of the budget and it takes about $estimate s"
		return
	fi
	say "## $name ($(left) s left, estimate $estimate s): $*"
	"$@" >"$logs/$name.out" 2>&1
	rc=$?
	grep -v '^$' "$logs/$name.out" | tee -a "$summary"
	say "## $name: exit $rc after $((SECONDS - t0)) s"
}

# table: 2 shapes x (etcd, 1 hub, 2 hubs, frontends) per round, plus two starts.
stage table $((ROUNDS * (8 * per_run + 15))) env UP_FLAGS="--child-gomaxprocs $TABLE_PROCS" scripts/bench-watch.sh

# cores: one hub under each --child-gomaxprocs, the 100,000-watcher shape first.
read -r -a procs <<<"$CORE_PROCS"
stage cores $((ROUNDS * ${#procs[@]} * (2 * per_run + 8))) env PROCS="$CORE_PROCS" scripts/bench-hub-cores.sh

# profile: one stack with pprof on, 100,000 watchers, 10 puts/s for 30 s, twice: straight on hub-1 (10 s of
# hub-1's CPU profile, then 10 s of its mutex profile), then through the frontends (the same of frontend-1,
# which relays a third of the streams).
profile_stack() ( # a subshell: its EXIT trap stops the stack
	work=$(mktemp -d)
	# shellcheck source=lib/bench.sh
	source scripts/lib/bench.sh
	trap 'bench_cleanup; mkdir -p "$logs/profile"; cp "$work"/up/logs/*.log "$logs/profile/" 2>/dev/null; rm -rf "$work"' EXIT
	up_start up --enable-pprof --child-gomaxprocs 16 || exit 1
	streams=$(awk -v k="$SCALE" 'BEGIN { n = int(1000 * k + 0.5); print (n < 1 ? 1 : n) }')
	# profile_run NAME CHILD [--watch-endpoints ADDR]: one bench run, profiling CHILD into NAME-{cpu,mutex}.pb.gz.
	profile_run() {
		local name=$1 child=$2 metrics bench
		shift 2
		metrics=$(up_child metrics "$child")
		"$CAIRN" bench --endpoints "$endpoints" --conns 3 --clients 3 --total 300 --rate 10 --cpu-profile "$out/$name-bench-cpu.pb.gz" \
			watch --streams "$streams" --watch-per-stream 100 --val-size 32 "$@" >"$work/$name.out" 2>&1 &
		bench=$!
		sleep 8
		http_get "http://127.0.0.1:$metrics/debug/pprof/profile?seconds=10" >"$out/$name-cpu.pb.gz"
		http_get "http://127.0.0.1:$metrics/debug/pprof/mutex?seconds=10" >"$out/$name-mutex.pb.gz"
		wait "$bench"
		echo "$name ($child profiled):"
		grep -E "Events:|Canceled:|50% in|99% in" "$work/$name.out"
		echo "profiles: $(wc -c <"$out/$name-cpu.pb.gz") bytes in $name-cpu.pb.gz, $(wc -c <"$out/$name-mutex.pb.gz") in $name-mutex.pb.gz," \
			"$(wc -c <"$out/$name-bench-cpu.pb.gz") in $name-bench-cpu.pb.gz"
	}
	profile_run hub watchhub-1 --watch-endpoints "127.0.0.1:$(up_child api watchhub-1)"
	profile_run relay frontend-1
)
stage profile 100 profile_stack

# conns: the cores stage's 100,000-watcher rows at 4 and 16 cores, with 3 connections to the hub.
stage conns $((ROUNDS * 2 * (per_run + 8))) env PROCS="4 16" WATCH_CONNS=3 SHAPES="1000x100@10" scripts/bench-hub-cores.sh

say "# done in $((SECONDS - began)) s"
