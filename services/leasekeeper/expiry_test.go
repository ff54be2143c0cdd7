package leasekeeper

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/cairn-kv/cairn/api/eventpb"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/eventbus/eventbustest"
	"github.com/cairn-kv/cairn/internal/keeperclaim"
	"github.com/cairn-kv/cairn/internal/testing/metricstest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// busWatcher collects every DELETE event seen on the bus, by key, with its revision and the revoke record.
type busWatcher struct {
	mu      sync.Mutex
	deleted map[string]int64 // key → revision of its DELETE
	revoked map[int64]int64  // lease → revision of its revoke
}

func watchBus(t *testing.T, env *testEnv) *busWatcher {
	w := &busWatcher{deleted: map[string]int64{}, revoked: map[int64]int64{}}
	nc := env.connectBus("test-watch")
	if _, err := eventbus.Subscribe(nc, env.prefix, func(rec *eventpb.AppliedRecord, _ eventbus.Meta) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, ev := range rec.Events {
			if ev.Type == mvccpb.DELETE {
				w.deleted[string(ev.Kv.Key)] = rec.Revision
			}
		}
		for _, c := range rec.Leases {
			if c.Type == eventpb.LeaseChange_REVOKED {
				w.revoked[c.Id] = rec.Revision
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	eventbustest.Flush(t, nc)
	return w
}

func (w *busWatcher) deleteRevision(key string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deleted[key]
}

// expiryPoll is how often a test looks whether a lease's key is gone.
const expiryPoll = 20 * time.Millisecond

// TestExpiryAndKeepAlive: a lease left alone is revoked at the first expiry tick after its TTL has passed since
// its grant (never before) with all its keys in one revision that watchers see as DELETE events; keep-alives
// extend a lease for as long as they come, and it expires at the first tick after its TTL has passed since the
// last one. The keeper, its storage and NATS run on the bubble's fake clock, so the bounds are exact (one expiry
// tick plus the test's poll interval) and the test takes no wall time for its TTLs.
func TestExpiryAndKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: TTLs on the bubble's fake clock
		env := newBubbleEnv(t, 1)
		bus := watchBus(t, env)
		k := env.startKeeper(env.keeperConfig("a"))
		waitActive(t, k, 5*time.Second)
		lc := env.leaseClient(t, k)
		tests := []struct {
			name      string
			ttl       int64
			keepAlive time.Duration // how long keep-alives are sent
		}{
			{"left alone", 2, 0},
			{"kept alive for 4s", 2, 4 * time.Second},
			{"longer TTL kept alive for 2s", 3, 2 * time.Second},
		}
		var wg sync.WaitGroup
		for _, tt := range tests {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := ctxT(t, 30*time.Second)
				granted := time.Now()
				g, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: tt.ttl})
				if err != nil {
					t.Errorf("%s: grant: %v", tt.name, err)
					return
				}
				keys := []string{tt.name + "/a", tt.name + "/b"}
				for _, key := range keys {
					env.put(ctx, key, g.ID)
				}
				last := granted
				if tt.keepAlive > 0 {
					stream, err := lc.LeaseKeepAlive(ctx)
					if err != nil {
						t.Errorf("%s: keep-alive stream: %v", tt.name, err)
						return
					}
					for time.Since(granted) < tt.keepAlive {
						sent := time.Now()
						if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: g.ID}); err != nil {
							t.Errorf("%s: send: %v", tt.name, err)
							return
						}
						if r, err := stream.Recv(); err != nil || r.TTL != tt.ttl {
							t.Errorf("%s: keep-alive answer %v, %v", tt.name, r, err)
							return
						}
						last = sent
						if !env.keyExists(ctx, keys[0]) {
							t.Errorf("%s: key gone while kept alive", tt.name)
							return
						}
						time.Sleep(400 * time.Millisecond)
					}
					_ = stream.CloseSend()
				}
				for env.keyExists(ctx, keys[0]) {
					if time.Since(last) > seconds(tt.ttl)+k.cfg.ExpiryTick+expiryPoll {
						t.Errorf("%s: key still there %v after the last keep-alive (TTL %ds)", tt.name, time.Since(last), tt.ttl)
						return
					}
					time.Sleep(expiryPoll)
				}
				if gone := time.Since(last); gone < seconds(tt.ttl) {
					t.Errorf("%s: expired %v after the last keep-alive, before its TTL %ds", tt.name, gone, tt.ttl)
				} else {
					t.Logf("%s: expired %v after the last keep-alive", tt.name, gone)
				}
				if env.keyExists(ctx, keys[1]) {
					t.Errorf("%s: second key survived the revoke", tt.name)
				}
				waittest.Until(t, 5*time.Second, 10*time.Millisecond, "DELETE events on the bus", func() bool {
					return bus.deleteRevision(keys[0]) != 0 && bus.deleteRevision(keys[0]) == bus.deleteRevision(keys[1])
				})
			}()
		}
		wg.Wait()
		// etcd's series: each lease that expired was revoked once (the keys' deletes checked above).
		// The keeper counts a revoke when its proposal returns, which can be after the keys' deletes are seen.
		var families metricstest.Families
		var n float64
		waittest.Until(t, 5*time.Second, 10*time.Millisecond, "every expiry counted", func() bool {
			families = metricstest.Gather(t, k.metrics.registry)
			n, _ = metricstest.Value(families, "etcd_debugging_server_lease_expired_total")
			return n >= float64(len(tests))
		})
		metricstest.Expect(t, families, []metricstest.Want{
			{Name: "etcd_debugging_server_lease_expired_total", Type: dto.MetricType_COUNTER},
		})
		if n != float64(len(tests)) {
			t.Errorf("etcd_debugging_server_lease_expired_total = %v, want %d", n, len(tests))
		}
	})
}

// TestStandbyAnswersNotActive: every Lease call to a standby is refused with FailedPrecondition "not the active
// leasekeeper", so the frontend tries the next keeper.
func TestStandbyAnswersNotActive(t *testing.T) {
	env := newTestEnv(t, 1)
	a := env.startKeeper(env.keeperConfig("a"))
	waitActive(t, a, 5*time.Second)
	b := env.startKeeper(env.keeperConfig("b"))
	lc := env.leaseClient(t, b)
	ctx := ctxT(t, 10*time.Second)
	g, err := env.leaseClient(t, a).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 10})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"grant":        func() error { _, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 10}); return err },
		"revoke":       func() error { _, err := lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: g.ID}); return err },
		"time to live": func() error { _, err := lc.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: g.ID}); return err },
		"leases":       func() error { _, err := lc.LeaseLeases(ctx, &pb.LeaseLeasesRequest{}); return err },
		"keep-alive": func() error {
			s, err := lc.LeaseKeepAlive(ctx)
			if err == nil {
				err = s.Send(&pb.LeaseKeepAliveRequest{ID: g.ID})
			}
			if err == nil {
				_, err = s.Recv()
			}
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !keeperclaim.IsNotActive(err) {
			t.Errorf("%s on the standby: %v, want FailedPrecondition %q", name, err, keeperclaim.NotActiveMessage)
		}
	}
	if _, err := env.store.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: g.ID}); err != nil {
		t.Fatal(err)
	}
}

// TestStorageEndpointFailover: a keeper whose first storage endpoint is down works through the next one.
func TestStorageEndpointFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: expiry on the bubble's fake clock
		env := newBubbleEnv(t, 2)
		cfg := env.keeperConfig("a")
		cfg.StorageEndpoints = []string{"http://127.0.0.1:1", env.storages[1].URL()}
		k := env.startKeeper(cfg)
		waitActive(t, k, 5*time.Second)
		ctx := ctxT(t, 10*time.Second)
		g, err := env.leaseClient(t, k).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 2})
		if err != nil {
			t.Fatal(err)
		}
		env.put(ctx, "failover/k", g.ID)
		waittest.Until(t, 4*time.Second, 10*time.Millisecond, "expiry through the second storage", func() bool {
			return !env.keyExists(ctx, "failover/k")
		})
		state, err := env.store.KeeperStatus(ctx)
		if err != nil || state.Holder != k.ID() {
			t.Fatalf("claim %v, %v; want held by %s", state, err, k.ID())
		}
	})
}
