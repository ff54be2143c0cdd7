package leasekeeper

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tools/bench"
)

// TestOnRaftCluster: the keeper works the same on storages of a real 3-member consensus cluster: grants and
// keep-alives, expiry of a lease left alone, and a revoke that every member applies.
func TestOnRaftCluster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: a TTL on the bubble's fake clock
		env := newBubbleRaftEnv(t)
		k := env.startKeeper(env.keeperConfig("a"))
		waitActive(t, k, 10*time.Second)
		lc := env.leaseClient(t, k)
		ctx := ctxT(t, 30*time.Second)
		g, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 2})
		if err != nil {
			t.Fatal(err)
		}
		env.put(ctx, "raft/k", g.ID)
		if ttl, err := k.Renew(ctx, g.ID); err != nil || ttl != 2 {
			t.Fatalf("keep-alive: %d, %v", ttl, err)
		}
		renewed := time.Now()
		// On the fake clock, at the first expiry tick after the TTL (raft rounds take no fake time).
		waittest.Until(t, 2*time.Second+k.cfg.ExpiryTick+expiryPoll, expiryPoll, "expiry on the raft cluster", func() bool {
			return !env.keyExists(ctx, "raft/k")
		})
		if since := time.Since(renewed); since < 2*time.Second {
			t.Fatalf("expired %v after the keep-alive, before its TTL", since)
		}
		for _, s := range env.storages {
			waittest.Until(t, 5*time.Second, 10*time.Millisecond, "every member to apply the revoke", func() bool {
				r, err := s.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: g.ID})
				return err == nil && r.TTL == -1
			})
		}
	})
}

// TestCompareWithEtcd runs the lease benchmarks (internal/tools/bench, as `cairn bench lease-keepalive` and
// `lease-grant-revoke`) against a keeper on a 3-member Raft cluster and against a 3-member etcd v3.7.3 in the
// same run, and prints one table. Opt-in: CAIRN_LEASE_COMPARE=1 (CAIRN_LEASE_COMPARE_TOTAL sets the request count).
func TestCompareWithEtcd(t *testing.T) {
	if os.Getenv("CAIRN_LEASE_COMPARE") == "" {
		t.Skip("set CAIRN_LEASE_COMPARE=1 to benchmark leases beside real etcd")
	}
	etcd := etcdreftest.StartCluster(t, 3)
	env := newRaftEnv(t)
	k := env.startKeeper(env.keeperConfig("bench"))
	waitActive(t, k, 10*time.Second)
	targets := []bench.Target{{Name: "etcd v3.7.3", Endpoints: etcd.Endpoints()},
		{Name: "cairn", Endpoints: []string{strings.TrimPrefix(k.URL(), "http://")}}}
	total := int64(100000)
	if v := os.Getenv("CAIRN_LEASE_COMPARE_TOTAL"); v != "" {
		if _, err := fmt.Sscan(v, &total); err != nil {
			t.Fatal(err)
		}
	}
	type scenario struct {
		name           string
		clients, conns int
		total          int64
		op             func() (bench.Op, func())
	}
	scenarios := []scenario{
		{"lease-keepalive, 100 clients, 10 conns", 100, 10, total, func() (bench.Op, func()) {
			b := bench.NewLeaseKeepAlive(bench.LeaseConfig{})
			return b.Op, b.Close
		}},
		{"lease-grant-revoke, 1 client", 1, 1, total / 100, func() (bench.Op, func()) {
			return bench.LeaseGrantRevokeOp(bench.LeaseConfig{}), func() {}
		}},
		{"lease-grant-revoke, 100 clients, 10 conns", 100, 10, total / 10, func() (bench.Op, func()) {
			return bench.LeaseGrantRevokeOp(bench.LeaseConfig{}), func() {}
		}},
	}
	ctx := ctxT(t, 30*time.Minute)
	var results []bench.ComparisonResult
	for _, sc := range scenarios {
		for _, target := range targets {
			runner, err := bench.NewRunner(bench.RunnerConfig{Endpoints: target.Endpoints, Clients: sc.clients,
				Conns: sc.conns, Total: sc.total})
			if err != nil {
				t.Fatal(err)
			}
			if err := runner.Start(ctx); err != nil {
				t.Fatal(err)
			}
			op, closeOp := sc.op()
			summary, err := runner.Run(ctx, sc.name, op)
			closeOp()
			_ = runner.Stop(ctx)
			result := bench.ComparisonResult{Scenario: sc.name, Target: target.Name, Summary: summary}
			if err != nil {
				result.Err = err.Error()
			}
			results = append(results, result)
		}
	}
	var table strings.Builder
	if err := bench.WriteComparison(&table, results); err != nil {
		t.Fatal(err)
	}
	t.Logf("lease benchmarks, same run:\n%s", table.String())
}
