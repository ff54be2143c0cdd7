#!/usr/bin/env bash
# What TLS costs Cairn and etcd, in one run: a 3-member etcd v3.7.3 plain and with peer and client TLS, and
# `cairn up` plain and with --tls, each measured with etcd's documented rows (put 1 client, put 1000 clients on
# 100 connections, both --target-leader; linearizable range with 1000 clients), one after the other.
#
#   scripts/bench-tls.sh                                  # builds bin/cairn; etcd from the user cache dir
#   CAIRN=/path/cairn ETCD=/path/etcd scripts/bench-tls.sh
#   ROUNDS=3 scripts/bench-tls.sh                        # every row 3 times, interleaved
#   PUT1_TOTAL=10000 MANY_TOTAL=100000 scripts/bench-tls.sh   # etcd's documented totals (the defaults)
set -euo pipefail
cd "$(dirname "$0")/.."
PUT1_TOTAL=${PUT1_TOTAL:-10000}
MANY_TOTAL=${MANY_TOTAL:-100000}
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset), ETCD and ETCDCTL
trap 'bench_cleanup; rm -rf "$work"' EXIT
"$CAIRN" certs --dir "$work/pki" etcd-1 etcd-2 etcd-3 client >/dev/null
pki=$work/pki
tlsflags="--cacert $pki/ca.pem --cert $pki/client.pem --key $pki/client-key.pem"

# rows ENDPOINTS [TLS FLAGS]: prints "put1 put1000 range-l" requests/s.
rows() {
	local endpoints=$1 flags=${2:-}
	rate "$endpoints" "$flags" --total 1 put >/dev/null || true # ranged key, warm-up
	echo "$(rate "$endpoints" "$flags" --target-leader --conns 1 --clients 1 --total "$PUT1_TOTAL" put --key-size 8 --val-size 256)" \
		"$(rate "$endpoints" "$flags" --target-leader --conns 100 --clients 1000 --total "$MANY_TOTAL" put --key-size 8 --val-size 256)" \
		"$(rate "$endpoints" "$flags" --conns 100 --clients 1000 --total "$MANY_TOTAL" range foo --consistency l)"
}

printf '%-22s %12s %15s %12s\n' "requests/s" "put 1 client" "put 1000 clients" "range l"
for round in $(seq "${ROUNDS:-1}"); do # ROUNDS=N repeats every row N times, interleaved, to show the noise
	etcd_start etcd-plain$round http 31000
	printf '%-22s %12s %15s %12s\n' "etcd plain" $(rows "$endpoints")
	stop_etcd
	etcd_start etcd-tls$round https 32000 --cert-file "$pki/etcd-@i@.pem" --key-file "$pki/etcd-@i@-key.pem" \
		--peer-cert-file "$pki/etcd-@i@.pem" --peer-key-file "$pki/etcd-@i@-key.pem" --peer-trusted-ca-file "$pki/ca.pem" --peer-client-cert-auth
	printf '%-22s %12s %15s %12s\n' "etcd peer+client TLS" $(rows "$endpoints" "$tlsflags")
	stop_etcd
	up_start cairn-plain$round
	printf '%-22s %12s %15s %12s\n' "cairn up" $(rows "$endpoints")
	stop_last
	up_start cairn-tls$round --tls
	upki=$work/cairn-tls$round/pki
	printf '%-22s %12s %15s %12s\n' "cairn up --tls" $(rows "$endpoints" "--cacert $upki/ca.pem --cert $upki/client.pem --key $upki/client-key.pem")
	stop_last
done
