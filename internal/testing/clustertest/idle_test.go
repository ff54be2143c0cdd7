package clustertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestIdleClusterWritesNothing: a cluster with an active leasekeeper, a standby and a watchhub, and no client,
// writes nothing to its log once it has settled (etcd's does not either): the raft index that `etcdctl
// endpoint status` shows stays put for several keeper renew intervals.
func TestIdleClusterWritesNothing(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Leasekeepers: 2, Watchhubs: 1})
	c.ActiveLeasekeeper(10 * time.Second)
	client := c.Client(t)
	endpoint := c.Endpoints()[0]
	raftIndex := func() uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		status, err := client.Status(ctx, endpoint)
		if err != nil {
			t.Fatalf("status of %s: %v", endpoint, err)
		}
		return status.RaftIndex
	}
	// Starting writes a few entries (the keeper's claim, the members' attributes): wait until a second passes
	// without one (the first look only records the index).
	var settled uint64
	waittest.Until(t, 15*time.Second, time.Second, "the raft index to settle", func() bool {
		index := raftIndex()
		stable := index == settled
		settled = index
		return stable
	})
	const idle = 3 * time.Second // 15 renew intervals of the keeper's claim
	for deadline := time.Now().Add(idle); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond) // sampling the index over the window, not waiting for a condition
		if index := raftIndex(); index != settled {
			t.Fatalf("raft index %d after %d at rest: the idle cluster wrote %d entries", index, settled, index-settled)
		}
	}
	if c.ActiveLeasekeeper(time.Second) == nil {
		t.Fatal("no active leasekeeper after the idle window")
	}
}
