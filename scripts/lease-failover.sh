#!/usr/bin/env bash
# How long a lease abandoned at a crash of the active leasekeeper lives after its last keep-alive, and how soon the
# standby takes over (bound: TTL + 3 s; TTL 2 s), from the failover tests that check it, run COUNT times each:
# in-process with peers (clustertest), two `cairn leasekeeper` processes with log renewals (cmd/cairn), and `cairn up`
# (e2e, builds its own binary). Prints each run's figures and the load average. Exits non-zero if a run fails.
#
#   scripts/lease-failover.sh            # COUNT=3
#   COUNT=10 SUITES="clustertest e2e" scripts/lease-failover.sh
set -uo pipefail
count=${COUNT:-3}
suites=${SUITES:-"clustertest cmd e2e"}
cd "$(dirname "$0")/.."
status=0
run() { # name package test
	echo "== $1 ($3, $count runs; load $(cut -d' ' -f1-3 /proc/loadavg))"
	local out rc
	out=$(go test -count="$count" -run "^$3\$" -v "$2" 2>&1)
	rc=$?
	grep -E 'standby active|expired .* after its last keep-alive|survives|^--- (PASS|FAIL)|^(ok|FAIL)' <<<"$out"
	return $rc
}
for suite in $suites; do
	case $suite in
	clustertest) run clustertest ./internal/testing/clustertest TestLeasekeeperCrashThroughFrontend || status=1 ;;
	cmd) run cmd/cairn ./cmd/cairn TestLeasekeeperProcessesKill9 || status=1 ;;
	e2e) run e2e ./e2e TestLeasekeeperKill9OnCairnUp || status=1 ;;
	*) echo "unknown suite $suite" >&2; status=2 ;;
	esac
done
exit $status
