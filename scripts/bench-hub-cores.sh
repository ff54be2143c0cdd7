#!/usr/bin/env bash
# One hub's watch delivery against its cores (issue 23: a hub's capacity grows with its cores): the 1-hub rows of
# scripts/bench-watch.sh under `cairn up --child-gomaxprocs P` for each P in PROCS. Compare events/s and
# events/CPU-s between the rows of one run; on a machine with fewer cores than P the rows only show the cost.
#
#   CAIRN=/path/cairn PROCS="1 2 4" SCALE=0.1 scripts/bench-hub-cores.sh
#   CAIRN=/path/cairn PROCS="1 4 16" SCALE=1 scripts/bench-hub-cores.sh      # a 16-core machine
set -euo pipefail
cd "$(dirname "$0")/.."
for procs in ${PROCS:-1 2 4}; do
	echo "# --child-gomaxprocs $procs"
	TARGETS=1hub UP_FLAGS="${UP_FLAGS:-} --child-gomaxprocs $procs" scripts/bench-watch.sh
done
