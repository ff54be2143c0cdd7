package bench

import (
	"testing"
)

// TestLeaseBenchmarksAgainstEtcd runs the lease benchmarks against a real etcd and checks what they left: one
// lease per keep-alive stream, and none from grant-revoke.
func TestLeaseBenchmarksAgainstEtcd(t *testing.T) {
	cluster, check, ctx := startEtcd(t)
	runner, err := NewRunner(RunnerConfig{Endpoints: cluster.Endpoints(), Clients: 6, Conns: 2, Total: 300})
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer runner.Stop(ctx)

	keepAlive := NewLeaseKeepAlive(LeaseConfig{})
	summary, err := runner.Run(ctx, "lease-keepalive", keepAlive.Op)
	keepAlive.Close()
	if err != nil || summary.Requests != 300 || summary.Errors != 0 {
		t.Fatalf("lease-keepalive: %d requests, errors %v, %v", summary.Requests, summary.ErrorCounts, err)
	}
	leases, err := check.Leases(ctx)
	if err != nil || len(leases.Leases) < 1 || len(leases.Leases) > 6 {
		t.Fatalf("%d leases after lease-keepalive (%v), want one per stream, at most 6", len(leases.Leases), err)
	}
	ttl, err := check.TimeToLive(ctx, leases.Leases[0].ID)
	if err != nil || ttl.GrantedTTL != DefaultLeaseTTL {
		t.Fatalf("lease TTL %v, %v; want granted %d", ttl, err, DefaultLeaseTTL)
	}

	summary, err = runner.Run(ctx, "lease-grant-revoke", LeaseGrantRevokeOp(LeaseConfig{TTL: 30}))
	if err != nil || summary.Requests != 300 || summary.Errors != 0 {
		t.Fatalf("lease-grant-revoke: %d requests, errors %v, %v", summary.Requests, summary.ErrorCounts, err)
	}
	if after, err := check.Leases(ctx); err != nil || len(after.Leases) != len(leases.Leases) {
		t.Fatalf("%d leases after grant-revoke, want the %d from before", len(after.Leases), len(leases.Leases))
	}
}
