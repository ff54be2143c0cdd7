#!/usr/bin/env bash
# Encryption at rest, benchmarked in one run: a fresh 3-member `cairn up` with encryption off, with aesgcm, and
# with the reference KMS plugin (cmd/cairn-kms), each under the same rows: put from 1000 clients and linearizable
# and serializable range, with 1 KiB and 100 KiB values. Prints Requests/sec per row and mode, then, per row, the
# median over the rounds and the ratios aesgcm/off (goal ≥ 0.85) and kms/aesgcm (goal ≥ 0.95). Each range row
# starts once the stack has settled after the row before (settle), so it measures reads, not the put phase's
# aftermath (~330 MB of 100 KiB values at full size). Each put row also gives the CPU its stack spent per put
# (all its processes, from /proc, until the stack has settled after the row): the 100 KiB puts are bound by the
# disk, whose speed moves from round to round, and the CPU a put costs does not move with it; the summary shows
# it as puts per CPU-second (row put-cpu), so its ratios read like the others. put/s counts the puts that
# succeeded; put-failed counts the others (at 100 KiB on a small machine, 1000 clients queue past the 7 s
# request timeout, and the successful rate then measures that cliff more than the stack), and put-cpu-us
# divides by every put sent.
#
#   scripts/bench-encryption.sh              # full size, one round (about 10 minutes on 2 cores)
#   ROUNDS=3 scripts/bench-encryption.sh     # 3 rounds; each starts with another mode, so no mode always runs last
#   SCALE=10 scripts/bench-encryption.sh     # totals divided by 10, for a quick look
#   UP_FLAGS="--child-gomaxprocs 2" scripts/bench-encryption.sh   # flags for every cairn up
#   CAIRN=/path/cairn CAIRN_KMS=/path/cairn-kms scripts/bench-encryption.sh   # prebuilt binaries
#   SIZES=102400 ROUNDS=5 scripts/bench-encryption.sh   # some value sizes only (bytes; default "1024 102400")
#
# Each put row starts after a sync and once the stack has settled: the 100 KiB puts are bound by the disk, and
# the last stack's writes still on their way to it would slow whichever mode comes next.
set -euo pipefail
cd "$(dirname "$0")/.."
scale=${SCALE:-1}
rounds=${ROUNDS:-1}
work=$(mktemp -d)
# shellcheck source=lib/bench.sh
source scripts/lib/bench.sh # sets CAIRN (building bin/cairn when unset)
trap 'bench_cleanup; rm -rf "$work"' EXIT
if [[ -z "${CAIRN_KMS:-}" ]]; then
	go build -o bin/cairn-kms ./cmd/cairn-kms
	CAIRN_KMS=$PWD/bin/cairn-kms
fi
secret=$(head -c 32 /dev/urandom | base64)
"$CAIRN_KMS" rotate --key-file "$work/kms.json" >/dev/null
cat >"$work/aesgcm.yaml" <<YAML
kind: EncryptionConfiguration
resources:
- prefixes: [""]
  providers:
  - aesgcm: {keys: [{name: key1, secret: $secret}]}
YAML
cat >"$work/kms.yaml" <<YAML
kind: EncryptionConfiguration
resources:
- prefixes: [""]
  providers:
  - kms: {name: local-kms, command: $CAIRN_KMS, args: [--key-file, $work/kms.json]}
YAML

# stack_ticks NAME: the CPU clock ticks (user and system, 1/100 s) the processes of the stack NAME have used.
stack_ticks() {
	python3 -c 'import json, sys; print("\n".join(str(c["pid"]) for c in json.load(open(sys.argv[1]))["children"]))' \
		"$work/$1/stack.json" | while read -r pid; do cat "/proc/$pid/stat" 2>/dev/null; done |
		sed 's/^.*) //' | awk '{t += $12 + $13} END {print t + 0}'
}

# settle NAME: waits until the stack NAME has digested what the last phase wrote (bbolt commits, raft snapshots,
# the GC of the written values): the CPU its processes use, summed, stays under 0.3 core for two seconds in a row
# (an idle stack uses about 0.1), at most 120 s. So the next row measures its own requests, not the last one's
# aftermath. Prints nothing on stdout; how long it waited goes to stderr.
settle() {
	local quiet=0 waited=0 before after
	after=$(stack_ticks "$1")
	while ((quiet < 2 && waited < 120)); do
		sleep 1
		before=$after after=$(stack_ticks "$1") waited=$((waited + 1))
		# clock ticks are 1/100 s: under 30 a second is under 0.3 core
		if ((after - before < 30)); then quiet=$((quiet + 1)); else quiet=0; fi
	done
	echo "settled $1 in ${waited}s" >&2
}

# rows MODE ROUND: starts a stack in MODE and prints one line per value size: mode size put/s range-l/s range-s/s.
rows() {
	local mode=$1 round=$2 args=() size total first
	[ "$mode" != off ] && args=(--encryption-config "$work/$mode.yaml")
	# shellcheck disable=SC2086 # UP_FLAGS is a list of flags
	up_start "up-$mode-$round" "${args[@]}" ${UP_FLAGS:-}
	first=${endpoints%%,*}
	rate "$endpoints" "" --total 1 put >/dev/null || true # warm-up
	for size in ${SIZES:-1024 102400}; do
		sync
		settle "up-$mode-$round"
		total=$(((size == 1024 ? 100000 : 10000) / scale))
		local put=- rl rs ticks cpu=- out failed=-
		ticks=$(stack_ticks "up-$mode-$round")
		# a run that fails as a whole prints "-" and the rounds go on; puts/s counts the puts that succeeded, and
		# the puts that failed (timeouts: 1000 clients' 100 KiB puts queue for seconds) are counted apart
		out=$("$CAIRN" bench --endpoints "$endpoints" --conns=100 --clients=1000 put --key-size=8 --sequential-keys \
			--total="$total" --val-size="$size" 2>/dev/null) || true
		put=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
		if [[ -n "$put" ]]; then
			failed=$(awk '/Error distribution/ {e = 1; next} e && /^ *\[/ {gsub(/[][]/, "", $1); n += $1} END {print n + 0}' <<<"$out")
			settle "up-$mode-$round" # the CPU a put costs includes what the stack does after answering it
			cpu=$((($(stack_ticks "up-$mode-$round") - ticks) * 10000 / total))
		fi
		# the key the ranges read, holding one value of this size (through the JSON gateway)
		printf '{"key":"%s","value":"%s"}' "$(printf rangekey | base64)" "$(head -c "$size" /dev/zero | tr '\0' v | base64 -w0)" >"$work/put.json"
		# (retried: under load the gateway's put may time out; a key never written reads as "-")
		rl=- rs=-
		if curl -sf --retry 5 --retry-all-errors --retry-delay 1 "$first/v3/kv/put" -d @"$work/put.json" >/dev/null; then
			settle "up-$mode-$round"
			rl=$(rate "$endpoints" "" --conns=100 --clients=1000 range rangekey --consistency=l --total="$total") || rl=-
			settle "up-$mode-$round"
			rs=$(rate "$endpoints" "" --conns=100 --clients=1000 range rangekey --consistency=s --total="$total") || rs=-
		fi
		printf '%-8s %-7s %12s %12s %12s %12s %12s\n' "$mode" "$((size / 1024))KiB" "${put:--}" "$rl" "$rs" "$cpu" "$failed"
	done
	stop_last
}

modes=(off aesgcm kms)
printf '%-8s %-7s %12s %12s %12s %12s %12s\n' mode value put/s range-l/s range-s/s put-cpu-us put-failed | tee "$work/rows"
for round in $(seq "$rounds"); do
	for i in 0 1 2; do
		# not in a pipeline: rows must run in this shell, so bench_cleanup knows the stack it started
		rows "${modes[$(((round - 1 + i) % 3))]}" "$round" >"$work/last"
		cat "$work/last"
		cat "$work/last" >>"$work/rows"
	done
done
[ "$rounds" -gt 1 ] && echo && echo "median of $rounds rounds; ratios of the medians"
python3 - "$work/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]).readlines()[1:] if l.strip()]
med = {}
for mode, size, *rates in rows:
    for col, r in zip(("put", "range-l", "range-s", "put-cpu"), rates):
        if r.replace(".", "", 1).isdigit():
            # CPU µs per put: lower is better, so its row shows puts per CPU-second
            med.setdefault((size, col), {}).setdefault(mode, []).append(float(r) if col != "put-cpu" else 1e6 / float(r))
print("%-7s %-8s %10s %10s %10s %11s %11s" % ("value", "row", "off", "aesgcm", "kms", "aesgcm/off", "kms/aesgcm"))
for (size, col), by in med.items():
    m = {mode: statistics.median(by.get(mode) or [float("nan")]) for mode in ("off", "aesgcm", "kms")}
    print("%-7s %-8s %10.0f %10.0f %10.0f %11.2f %11.2f" % (size, col, m["off"], m["aesgcm"], m["kms"],
          m["aesgcm"] / m["off"], m["kms"] / m["aesgcm"]))
PY
