// Package leasetest holds the leasekeeper failover check shared by the in-process suite (internal/testing/clustertest)
// and the multi-process suite (e2e, cairn up): what the Lease issue promises when the active keeper dies.
package leasetest

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/cairn-kv/cairn/internal/keeperclaim"
	"github.com/cairn-kv/cairn/internal/storageclient"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// Failover is what the check needs of the cluster under test.
type Failover struct {
	// Client reaches the cluster's frontends.
	Client *clientv3.Client
	// Storage is one storage replica: the keeper claim's epoch and a fenced revoke are asked of it.
	Storage *storageclient.Client
	// Crash kills the active keeper without a clean stop.
	Crash func()
	// StandbyActive reports whether the standby has become the active keeper.
	StandbyActive func() bool
	// Restart brings the crashed keeper back (or waits until its supervisor has) and returns once it runs.
	Restart func()
	// CrashedActive reports whether the crashed keeper is active again.
	CrashedActive func() bool
}

// Run crashes the active keeper under client/v3 traffic and checks: the standby takes over within 3 s; a
// session kept alive through the failover keeps its lease and key; a lease whose keep-alives stop at the crash
// expires no earlier than its 2 s TTL and within TTL + 3 s of its last keep-alive; the restarted keeper stays
// standby; the claim's epoch went up by one and a revoke with the crashed keeper's epoch is refused.
func Run(t *testing.T, f Failover) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	session, err := concurrency.NewSession(f.Client, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	if _, err := f.Client.Put(ctx, "session/key", "v", clientv3.WithLease(session.Lease())); err != nil {
		t.Fatal(err)
	}
	lastKeepAlive := keepShortLeaseAlive(ctx, t, f.Client)
	time.Sleep(1500 * time.Millisecond)
	before, err := f.Storage.KeeperStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := lastKeepAlive()
	crashed := time.Now()
	f.Crash()
	waittest.Until(t, 3*time.Second, 20*time.Millisecond, "the standby leasekeeper to take over", f.StandbyActive)
	t.Logf("standby active %v after the crash", time.Since(crashed))
	checkExpiry(ctx, t, f.Client, last)

	time.Sleep(5 * time.Second) // past the session's TTL
	select {
	case <-session.Done():
		t.Fatal("the session kept alive through the failover ended")
	default:
	}
	if ttl, err := f.Client.TimeToLive(ctx, session.Lease()); err != nil || ttl.TTL <= 0 {
		t.Fatalf("session lease after the failover: %v, %v", ttl, err)
	}
	if resp, err := f.Client.Get(ctx, "session/key"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("session key after the failover: %v, %v", resp, err)
	}

	f.Restart()
	time.Sleep(time.Second)
	if f.CrashedActive() || !f.StandbyActive() {
		t.Fatal("after its restart the crashed keeper took the role back")
	}
	after, err := f.Storage.KeeperStatus(ctx)
	if err != nil || after.Epoch != before.Epoch+1 {
		t.Fatalf("claim after the failover %v, %v; want epoch %d", after, err, before.Epoch+1)
	}
	_, err = f.Storage.SubmitFenced(ctx, &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: int64(session.Lease())}}, before.Epoch)
	if !keeperclaim.IsStaleEpoch(err) {
		t.Fatalf("revoke with the crashed keeper's epoch %d: %v, want refused", before.Epoch, err)
	}
	if _, err := f.Client.TimeToLive(ctx, session.Lease()); err != nil {
		t.Fatal(err)
	}
}

// keepShortLeaseAlive grants a 2 s lease, attaches short/key to it and keeps it alive until the returned
// function is called; that function stops the keep-alives and returns the time of the last answer.
func keepShortLeaseAlive(ctx context.Context, t *testing.T, cli *clientv3.Client) (stop func() time.Time) {
	short, err := cli.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "short/key", "v", clientv3.WithLease(short.ID)); err != nil {
		t.Fatal(err)
	}
	kaCtx, cancel := context.WithCancel(ctx)
	answers, err := cli.KeepAlive(kaCtx, short.ID)
	if err != nil {
		t.Fatal(err)
	}
	lastAnswer := make(chan time.Time, 1)
	go func() {
		var last time.Time
		for range answers {
			last = time.Now()
		}
		lastAnswer <- last
	}()
	return func() time.Time {
		cancel()
		return <-lastAnswer
	}
}

// checkExpiry polls short/key until it is gone: not before the lease's 2 s TTL has passed since its last
// keep-alive answer, and not later than 5 s after it. A Get that still finds the key proves the lease alive
// only when the Get was sent; one that finds it gone proves it expired by the time the answer came.
func checkExpiry(ctx context.Context, t *testing.T, cli *clientv3.Client, last time.Time) {
	for {
		sent := time.Since(last)
		resp, err := cli.Get(ctx, "short/key")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			age := time.Since(last)
			if age < 1900*time.Millisecond {
				t.Fatalf("the short lease expired by %v after its last keep-alive answer, before its 2s TTL", age)
			}
			t.Logf("short lease expired %v to %v after its last keep-alive answer", sent, age)
			return
		}
		if sent > 5*time.Second {
			t.Fatalf("the short lease survives %v after its last keep-alive answer (TTL 2s)", sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
