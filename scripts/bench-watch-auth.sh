#!/usr/bin/env bash
# What auth costs a watch create, per stream, in one run: `cairn dev` with auth off and on (root user, enabled
# with etcdctl), 10,000 watchers created on 1 stream and on 10 streams (`cairn bench watch`, as bench-auth.sh),
# and with auth on at --bcrypt-cost 10 (etcd's default) and 4 (bcrypt's minimum). Prints the seconds to create
# every watcher and how many Authenticate calls the frontend served meanwhile: client/v3 authenticates again
# before each new stream (its stream interceptor calls getToken, etcd issue 11954), so every stream costs one
# bcrypt comparison at --bcrypt-cost and one Authenticate entry through the log, against etcd as against Cairn.
#
#   scripts/bench-watch-auth.sh                        # builds bin/cairn
#   CAIRN=/path/cairn ETCDCTL=/path/etcdctl ROUNDS=3 scripts/bench-watch-auth.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset), ETCD and ETCDCTL
trap 'bench_cleanup; rm -rf "$work"' EXIT

# dev_start NAME [cairn dev flags]: starts `cairn dev` on random loopback ports (another, up to 5 times, when
# one is taken); its client URL is left in $endpoints.
dev_start() {
	local name=$1 attempt port
	shift
	for attempt in 1 2 3 4 5; do
		port=$((40000 + RANDOM % 20000))
		endpoints=http://127.0.0.1:$port
		rm -rf "${work:?}/$name"
		"$CAIRN" dev --data-dir "$work/$name" --listen-client-urls "$endpoints" \
			--listen-peer-urls "http://127.0.0.1:$((port + 1))" "$@" >"$work/$name.out" 2>"$work/$name.log" &
		pids+=($!)
		until healthy "$endpoints/health"; do
			if ! kill -0 "${pids[-1]}" 2>/dev/null; then
				unset 'pids[-1]'
				continue 2
			fi
			sleep 0.2
		done
		return 0
	done
	echo "cairn dev $name did not start; the end of its log:" >&2
	tail -n 20 "$work/$name.log" >&2
	return 1
}

# authenticates: Authenticate calls the frontend has answered.
authenticates() {
	curl -s "$endpoints/metrics" | awk '/^grpc_server_handled_total/ && /grpc_method="Authenticate"/ {n += $2} END {print n + 0}'
}

# create STREAMS FLAGS: "seconds authenticates" to create 10,000 watchers on STREAMS streams.
create() {
	local streams=$1 flags=$2 before seconds
	before=$(authenticates)
	seconds=$("$CAIRN" bench --endpoints "$endpoints" $flags --conns "$streams" --clients "$streams" --total 10 \
		--output json watch --streams "$streams" --watch-per-stream $((10000 / streams)) 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["params"]["create_sec"])')
	echo "$seconds $(($(authenticates) - before))"
}

line() { printf '%-24s %18s %18s\n' "$@"; }
line "10k watchers created in" "1 stream (s, auth)" "10 streams (s, auth)"
for round in $(seq "${ROUNDS:-1}"); do
	for mode in off "on cost 10" "on cost 4"; do
		args=() flags=""
		[[ $mode == "on cost 4" ]] && args=(--bcrypt-cost 4)
		dev_start "dev-${mode// /-}-$round" "${args[@]}"
		if [[ $mode != off ]]; then
			"$ETCDCTL" --endpoints "$endpoints" user add root --new-user-password pw --interactive=false >/dev/null
			"$ETCDCTL" --endpoints "$endpoints" user grant-role root root >/dev/null
			"$ETCDCTL" --endpoints "$endpoints" auth enable >/dev/null
			flags="--user root:pw"
		fi
		"$CAIRN" bench --endpoints "$endpoints" $flags --total 1 put >/dev/null 2>&1 || true # warm-up
		one=$(create 1 "$flags")
		ten=$(create 10 "$flags")
		line "auth $mode" "${one% *} (${one#* })" "${ten% *} (${ten#* })"
		stop_last
	done
done
