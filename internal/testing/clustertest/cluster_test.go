package clustertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

func opCtx(timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), timeout)
}

// TestWritesThroughAnyFrontendAreReadLinearizably writes through every frontend in turn and reads each
// acknowledged write back linearizably through another frontend.
func TestWritesThroughAnyFrontendAreReadLinearizably(t *testing.T) {
	c := Start(t, Options{})
	var clients []*clientv3.Client
	for _, url := range c.Endpoints() {
		clients = append(clients, c.Client(t, url))
	}
	for i := range 60 {
		ctx, cancel := opCtx(5 * time.Second)
		key, value := fmt.Sprintf("lin/%d", i%7), fmt.Sprint(i)
		put, err := clients[i%3].Put(ctx, key, value)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		get, err := clients[(i+1)%3].Get(ctx, key)
		cancel()
		if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != value || get.Kvs[0].ModRevision != put.Header.Revision {
			t.Fatalf("write %d through %s, linearizable read through %s: %v %v", i, c.Endpoints()[i%3], c.Endpoints()[(i+1)%3], get, err)
		}
	}
}

// ackedWrites runs bounded write loops through every frontend and records what was acknowledged.
type ackedWrites struct {
	mu    sync.Mutex
	acked map[string]int64 // key → revision
}

func (a *ackedWrites) run(clients []*clientv3.Client, writers, perWriter int, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			cli := clients[w%len(clients)]
			for i := range perWriter {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("acked/%d/%04d", w, i)
				ctx, cancel := opCtx(3 * time.Second)
				resp, err := cli.Put(ctx, key, key)
				cancel()
				if err == nil {
					a.mu.Lock()
					a.acked[key] = resp.Header.Revision
					a.mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}

func (a *ackedWrites) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked)
}

// TestLeaderConsensusKilledDuringWrites kills the leader's consensus while writes flow through every
// frontend: every acknowledged write must be readable afterwards and every member's HashKV must agree.
func TestLeaderConsensusKilledDuringWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"storage over consensusclient", Options{}},
		{"storage over the in-process node", Options{InProcessLog: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Start(t, tc.opts)
			var clients []*clientv3.Client
			for _, url := range c.Endpoints() {
				clients = append(clients, c.Client(t, url))
			}
			writes := &ackedWrites{acked: map[string]int64{}}
			done := make(chan struct{})
			stop := make(chan struct{})
			go func() { defer close(done); writes.run(clients, 6, 150, stop) }()
			waittest.Until(t, 20*time.Second, 5*time.Millisecond, "some writes acknowledged", func() bool {
				return writes.count() >= 100
			})
			leader := c.Leader(10 * time.Second)
			leader.KillConsensus()
			before := writes.count()
			waittest.Until(t, 30*time.Second, 5*time.Millisecond, "writes acknowledged after the leader died", func() bool {
				return writes.count() >= before+100
			})
			close(stop)
			<-done
			if err := leader.RestartConsensus(); err != nil {
				t.Fatal(err)
			}
			c.Leader(10 * time.Second)
			checkAcked(t, c, writes)
			checkHashesAgree(t, c)
		})
	}
}

func checkAcked(t *testing.T, c *Cluster, writes *ackedWrites) {
	t.Helper()
	cli := c.Client(t)
	ctx, cancel := opCtx(20 * time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "acked/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]int64{}
	for _, kv := range resp.Kvs {
		found[string(kv.Key)] = kv.ModRevision
	}
	writes.mu.Lock()
	defer writes.mu.Unlock()
	for key, rev := range writes.acked {
		if found[key] != rev {
			t.Errorf("acknowledged write %s at revision %d: read revision %d", key, rev, found[key])
		}
	}
	t.Logf("%d acknowledged writes, all readable (%d keys stored)", len(writes.acked), len(found))
}

// checkHashesAgree waits until every member's storage reached the same revision, then compares HashKV at it
// through each member's frontend.
func checkHashesAgree(t *testing.T, c *Cluster) {
	t.Helper()
	cli := c.Client(t)
	ctx, cancel := opCtx(30 * time.Second)
	defer cancel()
	last, err := cli.Put(ctx, "hash/barrier", "x")
	if err != nil {
		t.Fatal(err)
	}
	rev := last.Header.Revision
	var hashes []uint32
	for i, fe := range c.Frontends() {
		waittest.Until(t, 20*time.Second, 5*time.Millisecond, "member "+c.Members()[i].Name+" applied the barrier", func() bool {
			resp, err := cli.Get(ctx, "hash/barrier", clientv3.WithSerializable())
			_ = resp
			st, serr := cli.Status(ctx, fe.URL)
			return err == nil && serr == nil && st.Header.Revision >= rev
		})
		resp, err := cli.HashKV(ctx, fe.URL, rev)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, resp.Hash)
	}
	for _, h := range hashes[1:] {
		if h != hashes[0] {
			t.Fatalf("HashKV at revision %d differs between members: %v", rev, hashes)
		}
	}
}

// TestStorageCatchesUpBySnapshot takes a member down, wipes its storage, lets the others write and compact
// their logs past it, and brings it back: its consensus gets a raft snapshot from the leader, and its empty
// storage fetches the state from the leader's storage.
func TestStorageCatchesUpBySnapshot(t *testing.T) {
	c := Start(t, Options{SnapshotCount: 50, SnapshotCatchUpEntries: 10})
	lagging := c.Members()[2]
	if lagging == c.Leader(10*time.Second) {
		lagging = c.Members()[1]
	}
	lagging.StopStorage()
	lagging.StopConsensus()
	if err := lagging.WipeStorage(); err != nil {
		t.Fatal(err)
	}
	cli := c.Client(t, c.Endpoints()[0])
	for i := range 300 {
		ctx, cancel := opCtx(5 * time.Second)
		_, err := cli.Put(ctx, fmt.Sprintf("snap/%03d", i), "v")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	leader := c.Leader(10 * time.Second)
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, "the leader compacted its log", func() bool {
		return firstEntryIsSnapshot(leader, 0)
	})
	if err := lagging.RestartConsensus(); err != nil {
		t.Fatal(err)
	}
	if err := lagging.StartStorage(); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 30*time.Second, 5*time.Millisecond, "the wiped storage caught up", func() bool {
		st := lagging.Storage()
		if st == nil {
			return false
		}
		ctx, cancel := opCtx(time.Second)
		defer cancel()
		resp, err := st.Status(ctx)
		return err == nil && resp.Revision >= 301
	})
	if !firstEntryIsSnapshot(lagging, leader.ID()) {
		t.Fatal("the lagging member's log does not start with the leader's snapshot: it did not catch up by snapshot")
	}
	checkHashesAgree(t, c)
}

// firstEntryIsSnapshot reports whether m's log no longer starts at index 1 but with a snapshot (taken at
// source, when source is not 0).
func firstEntryIsSnapshot(m *Member, source uint64) bool {
	ctx, cancel := opCtx(2 * time.Second)
	defer cancel()
	var first commitlog.Entry
	_ = m.Node().Committed(ctx, 1, func(entries []commitlog.Entry) error {
		first = entries[0]
		cancel()
		return context.Canceled
	})
	return first.Kind == commitlog.KindSnapshot && (source == 0 || first.Snapshot.SourceMemberID == source)
}

// TestWipedStorageOfRunningMemberCatchesUp: a storage that loses its data while its own consensus keeps running
// and has compacted its log is handed a snapshot naming itself; it must fetch the state from another member.
func TestWipedStorageOfRunningMemberCatchesUp(t *testing.T) {
	c := Start(t, Options{SnapshotCount: 50, SnapshotCatchUpEntries: 10})
	m := c.Members()[1]
	cli := c.Client(t, c.Endpoints()[0])
	for i := range 300 {
		ctx, cancel := opCtx(5 * time.Second)
		_, err := cli.Put(ctx, fmt.Sprintf("wipe/%03d", i), "v")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, "the member compacted its own log", func() bool {
		return firstEntryIsSnapshot(m, 0)
	})
	m.StopStorage()
	if err := m.WipeStorage(); err != nil {
		t.Fatal(err)
	}
	if err := m.StartStorage(); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 30*time.Second, 5*time.Millisecond, "the wiped storage caught up", func() bool {
		st := m.Storage()
		if st == nil {
			return false
		}
		ctx, cancel := opCtx(time.Second)
		defer cancel()
		resp, err := st.Status(ctx)
		return err == nil && resp.Revision >= 301
	})
	checkHashesAgree(t, c)
}
