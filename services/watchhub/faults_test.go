package watchhub

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// revisionChecker is one watcher that must see every revision from next on exactly once, in order.
type revisionChecker struct {
	mu   sync.Mutex
	next int64
	err  error
}

func (c *revisionChecker) run(wch clientv3.WatchChan) {
	for resp := range wch {
		c.mu.Lock()
		if err := resp.Err(); err != nil && c.err == nil {
			c.err = fmt.Errorf("watch failed at revision %d: %w", c.next, err)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != c.next && c.err == nil {
				c.err = fmt.Errorf("got revision %d, want %d", ev.Kv.ModRevision, c.next)
			}
			c.next = ev.Kv.ModRevision + 1
		}
		c.mu.Unlock()
	}
}

func (c *revisionChecker) state() (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next, c.err
}

// TestEveryRevisionOnceThroughFaults: 100 watchers on two hubs each see every revision of a write stream
// exactly once and in order, while the NATS server is killed and restarted, both storages drop records from
// the bus, a storage restarts, and the hub half of the watchers are on stops (they resume on the other).
func TestEveryRevisionOnceThroughFaults(t *testing.T) {
	env := newTestEnv(t, 2)
	hubCfg := Config{WindowRevisions: 300}
	hub1, hub2 := env.startHub(hubCfg), env.startHub(hubCfg)
	start := env.put("w/start", "0") + 1
	const watchers, perClient, writes = 100, 10, 1400
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var checkers []*revisionChecker
	for c := 0; c < watchers/perClient; c++ {
		// The first half start on hub1 only, the others on hub2 only (an unwatched hub follows nothing, so each
		// must have streams for the faults to bite on both); then each may also use the other hub.
		cli := newClient(t, hub2.Addr())
		if c < watchers/perClient/2 {
			cli = newClient(t, hub1.Addr())
		}
		for range perClient {
			chk := &revisionChecker{next: start}
			wch := cli.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithRev(start), clientv3.WithCreatedNotify())
			if resp := <-wch; !resp.Created {
				t.Fatalf("watch not created: %v", resp.Err())
			}
			go chk.run(wch)
			checkers = append(checkers, chk)
		}
		if c < watchers/perClient/2 {
			cli.SetEndpoints(hub1.Addr(), hub2.Addr())
		} else {
			cli.SetEndpoints(hub2.Addr(), hub1.Addr())
		}
	}
	for _, hub := range []*Hub{hub1, hub2} {
		if n := testutil.ToFloat64(hub.metrics.streams); n < watchers/perClient/2 {
			t.Fatalf("a hub has %v streams, want at least %d", n, watchers/perClient/2)
		}
	}

	faults := map[int]func(){
		200: func() { env.stopNATS() },
		400: func() { env.startNATS() },
		500: func() {
			every := func(n uint64) *func(uint64) bool { f := func(i uint64) bool { return i%n == 0 }; return &f }
			env.storages[0].drop.Store(every(3))
			env.storages[1].drop.Store(every(5))
		},
		800:  func() { env.storages[0].drop.Store(nil); env.storages[1].drop.Store(nil) },
		900:  func() { env.stopStorage(0) },
		1000: func() { env.startStorage(0) },
		1100: func() { stopHub(hub1) },
	}
	var last int64
	for i := range writes {
		if fault := faults[i]; fault != nil {
			fault()
		}
		rev, err := env.writeAny(ctxT(t), fmt.Sprintf("w/%d", i), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		last = rev
	}
	if want := start + writes - 1; last != want {
		t.Fatalf("last write at revision %d, want %d (only the test writes)", last, want)
	}
	waittest.Until(t, 30*time.Second, 5*time.Millisecond, "every watcher at the last revision", func() bool {
		for _, c := range checkers {
			if next, err := c.state(); err != nil || next <= last {
				return err != nil
			}
		}
		return true
	})
	for i, c := range checkers {
		if next, err := c.state(); err != nil || next != last+1 {
			t.Fatalf("watcher %d: next %d (want %d), %v", i, next, last+1, err)
		}
	}
	if testutil.ToFloat64(hub2.metrics.filledRevisions) == 0 {
		t.Fatal("hub2 never filled a revision from storage, so the faults did not bite")
	}
	t.Logf("hub2 filled %v revisions in %v fills; %v bus records delivered",
		testutil.ToFloat64(hub2.metrics.filledRevisions), testutil.ToFloat64(hub2.metrics.fills),
		testutil.ToFloat64(hub2.metrics.busRecords.WithLabelValues("delivered")))
}
