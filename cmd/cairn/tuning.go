package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/storage"
	"github.com/cairn-kv/cairn/services/watchhub"
)

// etcdTuning holds the etcd flags operators tune, which `cairn up` and `cairn dev` take (with etcd's names,
// defaults and checks) and hand to the services that use them.
type etcdTuning struct {
	heartbeatMs, electionMs uint
	snapshotCount           uint64
	quotaBackendBytes       int64
	maxRequestBytes         uint
	maxTxnOps               uint
	// api: registerAPI was called (cairn dev has these three flags of its own).
	api bool
	// maxWatchLag is Cairn's own (etcd has no bound): the watchhubs' --max-watch-lag; watch: registerWatch was
	// called.
	maxWatchLag time.Duration
	watch       bool
}

// registerRaft adds --heartbeat-interval, --election-timeout and --snapshot-count (consensus's settings).
func (t *etcdTuning) registerRaft(flags *pflag.FlagSet) {
	defaults := consensus.DefaultConfig()
	flags.UintVar(&t.heartbeatMs, "heartbeat-interval", uint(defaults.HeartbeatInterval.Milliseconds()), "Time (in milliseconds) of a heartbeat interval.")
	flags.UintVar(&t.electionMs, "election-timeout", uint(defaults.ElectionTimeout.Milliseconds()), "Time (in milliseconds) for an election to timeout.")
	flags.Uint64Var(&t.snapshotCount, "snapshot-count", defaults.SnapshotCount, "Number of committed transactions to trigger a snapshot to disk.")
}

// registerAPI adds --quota-backend-bytes, --max-request-bytes and --max-txn-ops.
func (t *etcdTuning) registerAPI(flags *pflag.FlagSet) {
	t.api = true
	flags.Int64Var(&t.quotaBackendBytes, "quota-backend-bytes", storage.DefaultQuotaBackendBytes, "Raise alarms when backend size exceeds the given quota (negative disables it).")
	flags.UintVar(&t.maxRequestBytes, "max-request-bytes", 1572864, "Maximum client request size in bytes the server will accept.")
	flags.UintVar(&t.maxTxnOps, "max-txn-ops", 128, "Maximum number of operations permitted in a transaction.")
}

// registerWatch adds --max-watch-lag (the watchhubs' bound on how far behind a watcher may be served).
func (t *etcdTuning) registerWatch(flags *pflag.FlagSet) {
	t.watch = true
	flags.DurationVar(&t.maxWatchLag, "max-watch-lag", watchhub.DefaultMaxWatchLag, "Watchers more than this behind the head are canceled with a reason, so that their clients re-watch (every watchhub's --max-watch-lag).")
}

func (t *etcdTuning) heartbeat() time.Duration {
	return time.Duration(t.heartbeatMs) * time.Millisecond
}
func (t *etcdTuning) election() time.Duration { return time.Duration(t.electionMs) * time.Millisecond }

// validate makes etcd's checks of the flags, in etcd's words.
func (t *etcdTuning) validate() error {
	errs := []error{consensus.ValidateElection(t.heartbeat(), t.election())}
	if t.snapshotCount == 0 {
		errs = append(errs, config.Invalid("--snapshot-count", "--snapshot-count must be positive"))
	}
	if t.api && t.maxRequestBytes == 0 {
		errs = append(errs, config.Invalid("--max-request-bytes", "--max-request-bytes must be positive"))
	}
	if t.watch && t.maxWatchLag <= 0 {
		errs = append(errs, config.Invalid("--max-watch-lag", "--max-watch-lag must be positive"))
	}
	return errors.Join(errs...)
}

// childArgs are the flags given on the command line, as each service's command line takes them: consensus
// runs raft and bounds proposals, storage keeps the quota and checks requests, the frontend checks requests
// as etcd's API layer does, the watchhub cuts watch responses by the request limit and bounds watch lag.
func (t *etcdTuning) childArgs(flags *pflag.FlagSet) map[string][]string {
	args := map[string][]string{}
	pass := func(flag string, value string, services ...string) {
		if !flags.Changed(flag) {
			return
		}
		for _, svc := range services {
			args[svc] = append(args[svc], "--"+flag, value)
		}
	}
	pass("heartbeat-interval", strconv.FormatUint(uint64(t.heartbeatMs), 10), "consensus")
	pass("election-timeout", strconv.FormatUint(uint64(t.electionMs), 10), "consensus")
	pass("snapshot-count", strconv.FormatUint(t.snapshotCount, 10), "consensus")
	pass("quota-backend-bytes", strconv.FormatInt(t.quotaBackendBytes, 10), "storage")
	pass("max-request-bytes", fmt.Sprint(t.maxRequestBytes), "consensus", "storage", "frontend", "watchhub")
	pass("max-txn-ops", fmt.Sprint(t.maxTxnOps), "storage", "frontend")
	pass("max-watch-lag", t.maxWatchLag.String(), "watchhub")
	return args
}
