#!/usr/bin/env bash
# What TLS costs Cairn and etcd, in one run: a 3-member etcd v3.7.3 plain and with peer and client TLS, and
# `cairn up` plain and with --tls, each measured with etcd's documented rows (put 1 client, put 1000 clients on
# 100 connections, both --target-leader; linearizable range with 1000 clients), one after the other.
#
#   scripts/bench-tls.sh                                  # builds bin/cairn; etcd from the user cache dir
#   CAIRN=/path/cairn ETCD=/path/etcd scripts/bench-tls.sh
#   PUT1_TOTAL=10000 MANY_TOTAL=100000 scripts/bench-tls.sh   # etcd's documented totals (the defaults)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${CAIRN:-}" ]]; then
	go build -o bin/cairn ./cmd/cairn
	CAIRN=$PWD/bin/cairn
fi
ETCD=${ETCD:-${XDG_CACHE_HOME:-$HOME/.cache}/cairn/etcd-v3.7.3/etcd}
PUT1_TOTAL=${PUT1_TOTAL:-10000}
MANY_TOTAL=${MANY_TOTAL:-100000}
work=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
"$CAIRN" certs --dir "$work/pki" etcd-1 etcd-2 etcd-3 client >/dev/null
pki=$work/pki
tlsflags="--cacert $pki/ca.pem --cert $pki/client.pem --key $pki/client-key.pem"

# rows ENDPOINTS [TLS FLAGS]: prints "put1 put1000 range-l" requests/s.
rows() {
	local endpoints=$1 flags=${2:-} out
	run() { "$CAIRN" bench --endpoints "$endpoints" $flags "$@" 2>/dev/null | awk '/Requests\/sec/ {print $2}'; }
	"$CAIRN" bench --endpoints "$endpoints" $flags --total 1 put >/dev/null 2>&1 || true # ranged key, warm-up
	out="$(run --target-leader --conns 1 --clients 1 --total "$PUT1_TOTAL" put --key-size 8 --val-size 256)"
	out="$out $(run --target-leader --conns 100 --clients 1000 --total "$MANY_TOTAL" put --key-size 8 --val-size 256)"
	out="$out $(run --conns 100 --clients 1000 --total "$MANY_TOTAL" range foo --consistency l)"
	echo "$out"
}

# healthy URL: whether URL answers 200.
healthy() {
	if command -v curl >/dev/null; then curl -sf "$1" >/dev/null; else wget -q -O /dev/null "$1"; fi
}

# etcd NAME SCHEME BASE-PORT: starts a 3-member etcd; its client endpoints are left in $endpoints.
etcd() {
	local name=$1 scheme=$2 base=$3
	local cluster=""
	endpoints=""
	for i in 1 2 3; do cluster+="${cluster:+,}e$i=$scheme://127.0.0.1:$((base + 10 * i + 1))"; done
	for i in 1 2 3; do
		local client=$scheme://127.0.0.1:$((base + 10 * i)) peer=$scheme://127.0.0.1:$((base + 10 * i + 1)) extra=()
		if [[ $scheme == https ]]; then
			extra=(--cert-file "$pki/etcd-$i.pem" --key-file "$pki/etcd-$i-key.pem"
				--peer-cert-file "$pki/etcd-$i.pem" --peer-key-file "$pki/etcd-$i-key.pem"
				--peer-trusted-ca-file "$pki/ca.pem" --peer-client-cert-auth)
		fi
		"$ETCD" --name "e$i" --data-dir "$work/$name-$i" --listen-client-urls "$client" --advertise-client-urls "$client" \
			--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "$cluster" \
			--initial-cluster-token "$name" --listen-metrics-urls "http://127.0.0.1:$((base + 10 * i + 2))" \
			"${extra[@]}" >"$work/$name-$i.log" 2>&1 &
		pids+=($!)
		endpoints+="${endpoints:+,}$client"
	done
	for i in 1 2 3; do
		until healthy "http://127.0.0.1:$((base + 10 * i + 2))/health"; do sleep 0.2; done
	done
}

# up NAME [--tls]: starts `cairn up`; its client endpoints are left in $endpoints.
up() {
	local name=$1; shift
	"$CAIRN" up --data-dir "$work/$name" --client-port "$((40000 + RANDOM % 20000))" "$@" >"$work/$name.out" 2>"$work/$name.log" &
	pids+=($!)
	until grep -q "cairn is up" "$work/$name.out" 2>/dev/null; do sleep 0.2; done
	endpoints=$(sed -n 's/^cairn is up: etcd client endpoints //p' "$work/$name.out")
}

stop_last() { kill "${pids[-1]}" 2>/dev/null; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'; }
stop_etcd() { for _ in 1 2 3; do stop_last; done; }

printf '%-22s %12s %15s %12s\n' "requests/s" "put 1 client" "put 1000 clients" "range l"
etcd etcd-plain http 31000
printf '%-22s %12s %15s %12s\n' "etcd plain" $(rows "$endpoints")
stop_etcd
etcd etcd-tls https 32000
printf '%-22s %12s %15s %12s\n' "etcd peer+client TLS" $(rows "$endpoints" "$tlsflags")
stop_etcd
up cairn-plain
printf '%-22s %12s %15s %12s\n' "cairn up" $(rows "$endpoints")
stop_last
up cairn-tls --tls
upki=$work/cairn-tls/pki
printf '%-22s %12s %15s %12s\n' "cairn up --tls" $(rows "$endpoints" "--cacert $upki/ca.pem --cert $upki/client.pem --key $upki/client-key.pem")
stop_last
