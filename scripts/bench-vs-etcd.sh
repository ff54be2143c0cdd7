#!/usr/bin/env bash
# Side-by-side benchmark of reference etcd v3.7.3 and Cairn: builds bin/cairn, starts a 3-member etcd on
# loopback (etcd itself is built once per machine from the Go module proxy into the user cache dir) and a
# 3-member `cairn up` stack in a temporary directory, runs the rows of etcd's performance doc against each in
# turn, and prints one table per round.
#
#   scripts/bench-vs-etcd.sh                                   # etcd and a fresh `cairn up`
#   scripts/bench-vs-etcd.sh --cairn-endpoints 127.0.0.1:2379  # etcd and an already running Cairn
#   scripts/bench-vs-etcd.sh --etcd-only                       # etcd alone
#   scripts/bench-vs-etcd.sh --repeat 3 --output json          # any `cairn bench compare` flag
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/cairn ./cmd/cairn
exec bin/cairn bench compare "$@"
