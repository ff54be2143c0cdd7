#!/usr/bin/env bash
# CPU time each process of a running `cairn up` stack spends per request of one benchmark run, from the
# processes' /proc/<pid>/stat user+system ticks before and after (Linux; needs python3 for stack.json).
#
#   scripts/cpu-per-request.sh DATA_DIR TOTAL -- bin/cairn bench --endpoints ... --total TOTAL put ...
#
# DATA_DIR is the stack's --data-dir (its stack.json lists the children); TOTAL is the requests the bench sends.
set -euo pipefail
dir=$1 total=$2
shift 3
snapshot() {
  python3 - "$dir" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1] + '/stack.json'))['children']:
    try:
        fields = open('/proc/%d/stat' % c['pid']).read().rsplit(')', 1)[1].split()
        print(c['name'], int(fields[11]) + int(fields[12]))
    except (OSError, KeyError):
        pass
PY
}
before=$(mktemp) after=$(mktemp) client=$(mktemp)
trap 'rm -f "$before" "$after" "$client"' EXIT
snapshot >"$before"
python3 - "$client" "$@" <<'PY' 2>/dev/null | grep -E "Requests/sec" || true
import resource, subprocess, sys
subprocess.run(sys.argv[2:])
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], 'w').write('%f %f\n' % (usage.ru_utime, usage.ru_stime))
PY
snapshot >"$after"
python3 - "$total" "$(getconf CLK_TCK)" "$before" "$after" "$client" <<'PY'
import sys
total, tick = int(sys.argv[1]), int(sys.argv[2])
read = lambda f: dict(l.split() for l in open(f) if l.strip())
before, after = read(sys.argv[3]), read(sys.argv[4])
servers = 0.0
for name, ticks in after.items():
    if name in before:
        us = (int(ticks) - int(before[name])) / tick / total * 1e6
        servers += us
        print('%-14s %7.1f us/request' % (name, us))
print('%-14s %7.1f us/request' % ('all servers', servers))
user, system = map(float, open(sys.argv[5]).read().split()[-2:])
print('%-14s %7.1f us/request' % ('bench client', (user + system) / total * 1e6))
PY
