#!/usr/bin/env bash
# What auth costs Cairn and etcd, in one run: a 3-member etcd v3.7.3 with auth off and on, and `cairn up` with auth
# off and on (root user, enabled with etcdctl as an operator does), each measured with put 1 client, put 1000
# clients (--target-leader), linearizable range from 1000 clients, and the watch create rate (10,000 watchers
# on 10 streams, created one after another). Every authenticated run connects as root (simple tokens, both).
#
#   scripts/bench-auth.sh                                     # builds bin/cairn; etcd from the user cache dir
#   CAIRN=/path/cairn ETCD=/path/etcd ETCDCTL=/path/etcdctl scripts/bench-auth.sh
#   ROUNDS=3 scripts/bench-auth.sh                        # every row 3 times, interleaved
#   PUT1_TOTAL=2000 MANY_TOTAL=20000 scripts/bench-auth.sh    # smaller totals (defaults: etcd's 10000 and 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
PUT1_TOTAL=${PUT1_TOTAL:-10000}
MANY_TOTAL=${MANY_TOTAL:-100000}
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset), ETCD and ETCDCTL
trap 'bench_cleanup; rm -rf "$work"' EXIT

# enable_auth ENDPOINTS: adds root:pw with the root role and turns auth on, as an operator does.
enable_auth() {
	"$ETCDCTL" --endpoints "$1" user add root --new-user-password pw --interactive=false >/dev/null
	"$ETCDCTL" --endpoints "$1" user grant-role root root >/dev/null
	"$ETCDCTL" --endpoints "$1" auth enable >/dev/null
}

# watch_create ENDPOINTS FLAGS: watchers created per second.
watch_create() {
	"$CAIRN" bench --endpoints "$1" $2 --conns 10 --clients 10 --total 10 --output json \
		watch --streams 10 --watch-per-stream 1000 2>/dev/null |
		python3 -c 'import json,sys; p=json.load(sys.stdin)["params"]; print(round(int(p["watchers"])/float(p["create_sec"])))'
}

# rows ENDPOINTS [FLAGS]: prints "put1 put1000 range-l watch-create".
rows() {
	local endpoints=$1 flags=${2:-}
	rate "$endpoints" "$flags" --total 1 put >/dev/null || true # warm-up
	echo "$(rate "$endpoints" "$flags" --target-leader --conns 1 --clients 1 --total "$PUT1_TOTAL" put --key-size 8 --val-size 256)" \
		"$(rate "$endpoints" "$flags" --target-leader --conns 100 --clients 1000 --total "$MANY_TOTAL" put --key-size 8 --val-size 256)" \
		"$(rate "$endpoints" "$flags" --conns 100 --clients 1000 --total "$MANY_TOTAL" range foo --consistency l)" \
		"$(watch_create "$endpoints" "$flags")"
}

line() { printf '%-16s %12s %15s %12s %14s\n' "$@"; }
line "requests/s" "put 1 client" "put 1000 clients" "range l" "watch create/s"
for round in $(seq "${ROUNDS:-1}"); do # ROUNDS=N repeats every row N times, interleaved, to show the noise
	etcd_start etcd-off$round http "$(etcd_base)"
	line "etcd auth off" $(rows "$endpoints")
	stop_etcd
	etcd_start etcd-on$round http "$(etcd_base)"
	enable_auth "$endpoints"
	line "etcd auth on" $(rows "$endpoints" "--user root:pw")
	stop_etcd
	up_start cairn-off$round
	line "cairn auth off" $(rows "$endpoints")
	stop_last
	up_start cairn-on$round
	enable_auth "$endpoints"
	line "cairn auth on" $(rows "$endpoints" "--user root:pw")
	stop_last
done
