package storage

import (
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// TestWaitersExpireOnlyWhatStillWaits registers writes with deadlines out of order and checks that the one
// timer answers exactly those still waiting when their deadline passes, earliest first, each once, and never
// one registered without a deadline or answered before.
func TestWaitersExpireOnlyWhatStillWaits(t *testing.T) {
	w := newWaiters()
	defer w.stop()
	var mu sync.Mutex
	var expired, appliedIDs []uint64
	register := func(id uint64, in time.Duration) {
		var until time.Time
		if in > 0 {
			until = time.Now().Add(in)
		}
		entry := &storagepb.Entry{Request: &pb.InternalRaftRequest{ID: id}}
		w.registerFunc(waiter{entry: entry, done: func(a applied) {
			mu.Lock()
			defer mu.Unlock()
			if a.res == nil {
				expired = append(expired, id)
			} else {
				appliedIDs = append(appliedIDs, id)
			}
		}}, until)
	}
	register(1, 300*time.Millisecond)
	register(2, 100*time.Millisecond) // earlier than the timer is set for: it is set again
	register(3, 50*time.Millisecond)  // applied before its deadline
	register(4, 0)                    // no deadline
	register(5, 200*time.Millisecond) // its proposal failed: taken before its deadline
	w.trigger(3, applied{res: &mvcc.Result{}})
	if !w.take(5) {
		t.Fatal("take found no waiter for 5")
	}
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "writes 1 and 2 to expire", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(expired) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(expired, []uint64{2, 1}) || !slices.Equal(appliedIDs, []uint64{3}) {
		t.Fatalf("expired %v, applied %v; want [2 1], [3]", expired, appliedIDs)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.m[4]; !ok || len(w.m) != 1 {
		t.Fatalf("waiting %v, want only 4 (no deadline)", w.m)
	}
}
