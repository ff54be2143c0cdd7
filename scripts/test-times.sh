#!/usr/bin/env bash
# Per-package and per-test times of a test run, from `go test -json` (needs python3): the slowest packages and the
# slowest top-level tests, with failures named. Exits with go test's status.
#
#   scripts/test-times.sh                          # go test -count=1 ./...
#   scripts/test-times.sh -run TestX ./services/... # any go test arguments (packages last)
#   TOP=20 JSON=times.json scripts/test-times.sh   # how many to list; keep the raw -json stream
set -uo pipefail
top=${TOP:-10}
json=${JSON:-$(mktemp)}
[[ -n ${JSON:-} ]] || trap 'rm -f "$json"' EXIT
args=("$@")
((${#args[@]})) || args=(-count=1 ./...)
start=$(date +%s)
go test -json "${args[@]}" >"$json"
status=$?
python3 - "$json" "$top" "$(($(date +%s) - start))" <<'PY'
import json, sys
path, top, wall = sys.argv[1], int(sys.argv[2]), sys.argv[3]
packages, tests, failed = {}, {}, []
for line in open(path):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get('Action') not in ('pass', 'fail', 'skip') or 'Elapsed' not in e:
        continue
    pkg = e['Package']
    if 'Test' not in e:
        packages[pkg] = (e['Elapsed'], e['Action'])
    elif '/' not in e['Test']:
        tests[(pkg, e['Test'])] = (e['Elapsed'], e['Action'])
    if e['Action'] == 'fail':
        failed.append(pkg + ' ' + e.get('Test', ''))
total = sum(elapsed for elapsed, _ in packages.values())
print('%d packages, %.1fs of package time in %ss of wall time' % (len(packages), total, wall))
print('\nslowest packages:')
for pkg, (elapsed, action) in sorted(packages.items(), key=lambda kv: -kv[1][0])[:top]:
    print('  %8.2fs  %-4s  %s' % (elapsed, action, pkg))
print('\nslowest tests:')
for (pkg, test), (elapsed, action) in sorted(tests.items(), key=lambda kv: -kv[1][0])[:top]:
    print('  %8.2fs  %-4s  %s %s' % (elapsed, action, pkg, test))
if failed:
    print('\nfailed:')
    for name in failed:
        print('  ' + name)
PY
exit $status
