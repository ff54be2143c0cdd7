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
	raftPosition := func() (index, term uint64) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		status, err := client.Status(ctx, endpoint)
		if err != nil {
			t.Fatalf("status of %s: %v", endpoint, err)
		}
		return status.RaftIndex, status.RaftTerm
	}
	// settle waits until a second passes without an entry (the first look only records the index): starting
	// writes a few (the keeper's claim, the members' attributes).
	settle := func() (index, term uint64) {
		waittest.Until(t, 15*time.Second, time.Second, "the raft index to settle", func() bool {
			i, tm := raftPosition()
			stable := i == index && tm == term
			index, term = i, tm
			return stable
		})
		return index, term
	}
	const idle = 3 * time.Second // 15 renew intervals of the keeper's claim
	// An election on a loaded machine (the test cluster's timeout is short) makes the new leader append its empty
	// entry: raft's, not the idle cluster's writing; the window then starts again, a few times at most.
	for elections := 0; ; elections++ {
		settled, settledTerm := settle()
		newTerm := false
		for deadline := time.Now().Add(idle); time.Now().Before(deadline) && !newTerm; {
			time.Sleep(100 * time.Millisecond) // sampling the index over the window, not waiting for a condition
			index, term := raftPosition()
			switch {
			case term != settledTerm && elections < 3:
				t.Logf("term %d after %d: an election during the window; watching again", term, settledTerm)
				newTerm = true
			case index != settled:
				t.Fatalf("raft index %d after %d at rest: the idle cluster wrote %d entries", index, settled, index-settled)
			}
		}
		if !newTerm {
			break
		}
	}
	if c.ActiveLeasekeeper(time.Second) == nil {
		t.Fatal("no active leasekeeper after the idle window")
	}
}
