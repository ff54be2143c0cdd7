#!/usr/bin/env bash
# Large puts: 1000 clients on 100 connections putting N values of SIZE bytes (2000 of 100 KiB by default) into a
# 3-member etcd v3.7.3 and a `cairn up` (and a second cairn binary, AFTER, when given), fresh stacks, ROUNDS
# rounds in one run. Per run: successful puts per second (the bench's Requests/sec counts only successes), the
# failed requests by error, and the CPU of every process of the stack per request (failed ones included).
#
#   scripts/bench-bigput.sh                                          # builds bin/cairn
#   CAIRN=/path/before AFTER=/path/after ROUNDS=3 scripts/bench-bigput.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
source scripts/lib/bench.sh
BEFORE=$CAIRN
source scripts/lib/procstat.sh
trap 'bench_cleanup; rm -rf "$work"' EXIT
N=${N:-2000}; SIZE=${SIZE:-102400}; ROUNDS=${ROUNDS:-2}
one() {
  local name=$1 bin=$2; shift 2
  mapfile -t procs < <(tree_pids "$@")
  "$bin" bench --endpoints "$endpoints" --total 1 put >/dev/null 2>&1 || true
  sleep 2
  local l0 c0 c1 out; l0=$(cut -d' ' -f1 /proc/loadavg); c0=$(cpu_ticks "${procs[@]}")
  out=$("$bin" bench --endpoints "$endpoints" --conns=100 --clients=1000 put --key-size=8 --sequential-keys --total="$N" --val-size="$SIZE" 2>&1)
  sleep 3
  c1=$(cpu_ticks "${procs[@]}")
  local rate errs failed
  rate=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  failed=$(awk '/Error distribution/ {e=1; next} e && /^ *\[/ {gsub(/[\[\]]/,"",$1); s+=$1} END {print s+0}' <<<"$out")
  errs=$(awk '/Error distribution/ {e=1; next} e && /^ *\[/ {gsub(/[\[\]]/,"",$1); n=$1; $1=""; s=s n "×" $0 ";"} END {print s}' <<<"$out")
  echo "$name ok-put/s=$rate failed=$failed cpu-us/req=$(( (c1-c0)*10000/N )) load=$l0-$(cut -d' ' -f1 /proc/loadavg) ${errs}"
}
for round in $(seq "$ROUNDS"); do
  etcd_start etcd$round http "$(etcd_base)"
  one etcd "$CAIRN" "${pids[@]: -3}"
  stop_etcd
  for which in before ${AFTER:+after}; do
    bin=$BEFORE; [[ $which == after ]] && bin=$AFTER
    CAIRN=$bin up_start "$which$round"
    one "cairn-$which" "$bin" "${pids[-1]}"
    stop_last
  done
done
