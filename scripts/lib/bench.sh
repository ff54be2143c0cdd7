# Shared pieces of the side-by-side benchmark scripts (bench-tls.sh, bench-auth.sh, bench-encryption.sh):
# starting and stopping a 3-member etcd and a `cairn up`, and reading Requests/sec off `cairn bench`.
# Source it from the repository root after setting work (a scratch directory); the caller's EXIT trap calls
# bench_cleanup. CAIRN (the cairn binary; built into bin/cairn when unset), ETCD and ETCDCTL (etcd v3.7.3 as
# internal/tools/etcdref builds it into the user cache dir, by default) are set here unless given.

if [[ -z "${CAIRN:-}" ]]; then
	go build -o bin/cairn ./cmd/cairn
	CAIRN=$PWD/bin/cairn
fi
ETCD=${ETCD:-${XDG_CACHE_HOME:-$HOME/.cache}/cairn/etcd-v3.7.3/etcd}
ETCDCTL=${ETCDCTL:-$(dirname "$ETCD")/etcdctl}

pids=()

# bench_cleanup stops everything started here.
bench_cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
}

# http_get URL: the body of an HTTP GET of URL (http://127.0.0.1:PORT/PATH), failing unless it answers 200. It
# takes curl, wget or python3, whichever is there, so that the scripts also run on a bare machine (the device
# machine of scripts/device-watch-scale.sh has python3 and no promise of the others).
http_get() {
	if command -v curl >/dev/null; then
		curl -sf "$1"
	elif command -v wget >/dev/null; then
		wget -q -O - "$1"
	else
		python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=60).read())' "$1" 2>/dev/null
	fi
}

# healthy URL: whether URL answers 200.
healthy() { http_get "$1" >/dev/null; }

# up_child FIELD NAME: a field of the `cairn up` child NAME, read from the process table the last up_start's
# `cairn up` printed ($up_out): pid, or the port of one of its PORTS entries (api, client, metrics, peer).
# It reads the table rather than stack.json so that no JSON tool is needed.
up_child() {
	awk -v field="$1" -v name="$2" '
		$1 == name && $2 ~ /^[0-9]+$/ {
			if (field == "pid") { print $2; exit }
			n = split($5, ports, ",")
			for (i = 1; i <= n; i++) { split(ports[i], kv, "="); if (kv[1] == field) { print kv[2]; exit } }
		}' "$up_out"
}

# up_children PREFIX: the pids of the `cairn up` children whose names start with PREFIX, space-separated.
up_children() {
	awk -v prefix="$1" 'index($1, prefix) == 1 && $2 ~ /^[0-9]+$/ { printf "%s%s", sep, $2; sep = " " }' "$up_out"
}

# rate ENDPOINTS FLAGS BENCH-ARGS...: Requests/sec of one `cairn bench` run (FLAGS: TLS or --user flags, may be "").
rate() {
	local endpoints=$1 flags=$2
	shift 2
	"$CAIRN" bench --endpoints "$endpoints" $flags "$@" 2>/dev/null | awk '/Requests\/sec/ {print $2}'
}

# etcd_start NAME SCHEME BASE-PORT [EXTRA FLAGS PER MEMBER, with @i@ for the member's number]: starts a 3-member
# etcd; its client endpoints are left in $endpoints.
etcd_start() {
	local name=$1 scheme=$2 base=$3
	shift 3
	local cluster="" i
	endpoints=""
	for i in 1 2 3; do cluster+="${cluster:+,}e$i=$scheme://127.0.0.1:$((base + 10 * i + 1))"; done
	for i in 1 2 3; do
		local client=$scheme://127.0.0.1:$((base + 10 * i)) peer=$scheme://127.0.0.1:$((base + 10 * i + 1)) extra=()
		local a
		for a in "$@"; do extra+=("${a//@i@/$i}"); done
		"$ETCD" --name "e$i" --data-dir "$work/$name-$i" --listen-client-urls "$client" --advertise-client-urls "$client" \
			--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "$cluster" \
			--initial-cluster-token "$name" --listen-metrics-urls "http://127.0.0.1:$((base + 10 * i + 2))" \
			"${extra[@]}" >"$work/$name-$i.log" 2>&1 &
		pids+=($!)
		endpoints+="${endpoints:+,}$client"
	done
	local member
	for i in 1 2 3; do
		until healthy "http://127.0.0.1:$((base + 10 * i + 2))/health"; do
			for member in "${pids[@]: -3}"; do
				if ! kill -0 "$member" 2>/dev/null; then
					echo "etcd $name exited at start; the end of its logs:" >&2
					tail -n 3 "$work/$name"-[123].log >&2
					return 1
				fi
			done
			sleep 0.2
		done
	done
}

# etcd_base: a random base port for etcd_start, below the kernel's ephemeral range (32768 and up on Linux),
# where no client connection can hold it.
etcd_base() { echo $((20000 + RANDOM % 100 * 100)); }

# up_start NAME [cairn up flags]: starts `cairn up`; its client endpoints are left in $endpoints, and the file
# holding what it printed in $up_out. The client port is drawn below the kernel's ephemeral range (32768 and
# up on Linux), where the benchmark's own client connections cannot hold it; a stack that still finds its port
# taken is started once more on another.
up_start() {
	local name=$1 try
	shift
	for try in 1 2; do
		"$CAIRN" up --data-dir "$work/$name" --client-port "$((20000 + RANDOM % 10000))" "$@" \
			>"$work/$name.out" 2>"$work/$name.log" &
		pids+=($!)
		until grep -q "Ctrl-C stops every process" "$work/$name.out" 2>/dev/null; do # the banner's last line
			if ! kill -0 "${pids[-1]}" 2>/dev/null; then
				wait "${pids[-1]}" 2>/dev/null || true
				unset 'pids[-1]'
				if [[ $try == 1 ]] && grep -q "is not free" "$work/$name.log"; then
					rm -rf "${work:?}/$name"
					continue 2
				fi
				echo "cairn up $name exited at start; the end of its log:" >&2
				tail -n 20 "$work/$name.log" "$work/$name.out" >&2
				return 1
			fi
			sleep 0.2
		done
		up_out=$work/$name.out
		endpoints=$(sed -n 's/^cairn is up: etcd client endpoints //p' "$up_out")
		return 0
	done
}

# stop_last stops the last process started; stop_etcd the last etcd cluster.
stop_last() { kill "${pids[-1]}" 2>/dev/null; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'; }
stop_etcd() { for _ in 1 2 3; do stop_last; done; }
