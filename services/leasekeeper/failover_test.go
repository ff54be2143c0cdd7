package leasekeeper

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/keeperclaim"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// router sends lease calls to whichever keeper is active, moving on when one is unreachable or not active, as
// the frontend does.
type router struct {
	t       *testing.T
	clients []pb.LeaseClient
	next    atomic.Int32
}

func newRouter(t *testing.T, env *testEnv, keepers ...*Keeper) *router {
	r := &router{t: t}
	for _, k := range keepers {
		r.clients = append(r.clients, env.leaseClient(t, k))
	}
	return r
}

// do calls f on the current keeper, then the others, until one answers or 5s pass.
func (r *router) do(ctx context.Context, f func(ctx context.Context, c pb.LeaseClient) error) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := int(r.next.Load())
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		err := f(callCtx, r.clients[n])
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		r.next.CompareAndSwap(int32(n), int32((n+1)%len(r.clients)))
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *router) keepAlive(ctx context.Context, id int64) (int64, error) {
	var ttl int64
	err := r.do(ctx, func(ctx context.Context, c pb.LeaseClient) error {
		stream, err := c.LeaseKeepAlive(ctx)
		if err != nil {
			return err
		}
		defer stream.CloseSend()
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
			return err
		}
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		ttl = resp.TTL
		return nil
	})
	return ttl, err
}

// keepAliveUntil keeps lease id alive every period until stop closes, recording the time of the last keep-alive
// that was answered with the lease's TTL.
func (r *router) keepAliveUntil(ctx context.Context, id int64, period time.Duration, stop <-chan struct{}, last *atomic.Int64) {
	for {
		sent := time.Now()
		if ttl, err := r.keepAlive(ctx, id); err != nil || ttl <= 0 {
			r.t.Errorf("keep-alive of %x: TTL %d, %v", id, ttl, err)
			return
		}
		last.Store(sent.UnixNano())
		select {
		case <-stop:
			return
		case <-time.After(period):
		}
	}
}

// TestFailoverKillActive kills the active keeper (no release) with leases in every state and checks the
// acceptance bounds: the standby takes over within 3s (on the bubble's fake clock: TakeoverTimeout give or take
// the renew intervals with log renewals, a renew interval or two with peers); a lease kept alive through the failover never expires; no lease expires before its TTL;
// none survives more than TTL + 3s after its last keep-alive; a long lease resumes from its checkpoint instead of
// its full TTL; and the killed keeper's epoch can revoke nothing.
func TestFailoverKillActive(t *testing.T) {
	for _, mode := range claimModes() {
		t.Run(mode.name, func(t *testing.T) { testFailoverKillActive(t, mode) })
	}
}

func testFailoverKillActive(t *testing.T, mode claimMode) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: takeover timings on the bubble's fake clock
		env := mode.env(newBubbleEnv(t, 2))
		a := env.startKeeper(env.keeperConfig("a"))
		waitActive(t, a, 5*time.Second)
		b := env.startKeeper(env.keeperConfig("b"))
		r := newRouter(t, env, a, b)
		ctx := ctxT(t, 60*time.Second)
		grant := func(key string, ttl int64) int64 {
			var id int64
			if err := r.do(ctx, func(ctx context.Context, c pb.LeaseClient) error {
				g, err := c.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: ttl})
				if err == nil {
					id = g.ID
				}
				return err
			}); err != nil {
				t.Fatalf("grant %s: %v", key, err)
			}
			env.put(ctx, key, id)
			return id
		}
		t0 := time.Now()
		throughout := grant("throughout", 2)
		atKill := grant("at-kill", 2)
		grant("before-kill", 4)
		long := grant("long", 20)

		stopThroughout, stopAtKill := make(chan struct{}), make(chan struct{})
		var lastThroughout, lastAtKill atomic.Int64
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			r.keepAliveUntil(ctx, throughout, 300*time.Millisecond, stopThroughout, &lastThroughout)
		}()
		go func() { defer wg.Done(); r.keepAliveUntil(ctx, atKill, 300*time.Millisecond, stopAtKill, &lastAtKill) }()

		time.Sleep(2 * time.Second) // checkpoints of the long lease go out meanwhile
		oldState, err := env.store.KeeperStatus(ctx)
		if err != nil || oldState.Holder != a.ID() {
			t.Fatalf("claim before the kill: %v, %v", oldState, err)
		}
		close(stopAtKill)
		killed := time.Now()
		a.Crash()
		earliest, latest := mode.takeover(b.cfg)
		waitActive(t, b, latest)
		if took := time.Since(killed); took < earliest {
			t.Fatalf("standby active %v after the kill, before %v", took, earliest)
		}
		t.Logf("standby active %v after the kill", time.Since(killed))

		// The long lease resumes from its checkpoint (about 18s left), not from its full TTL plus the extension.
		ttl, err := env.leaseClient(t, b).LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: long})
		elapsed := time.Since(t0)
		if err != nil || float64(ttl.TTL) < 20-elapsed.Seconds()-1 || float64(ttl.TTL) > 20-elapsed.Seconds()+b.cfg.DeadlineExtension.Seconds()+1.5 {
			t.Fatalf("long lease TTL after failover %v, %v; want about %.1fs (checkpointed, plus the extension)", ttl, err, 20-elapsed.Seconds())
		}

		// Fencing: the killed keeper's epoch can neither revoke nor checkpoint.
		for _, req := range []*pb.InternalRaftRequest{
			{LeaseRevoke: &pb.LeaseRevokeRequest{ID: throughout}},
			{LeaseCheckpoint: &pb.LeaseCheckpointRequest{Checkpoints: []*pb.LeaseCheckpoint{{ID: long, Remaining_TTL: 1}}}},
		} {
			if _, err := env.store.SubmitFenced(ctx, req, oldState.Epoch); !keeperclaim.IsStaleEpoch(err) {
				t.Fatalf("fenced write of the old epoch %d: %v, want a stale epoch refusal", oldState.Epoch, err)
			}
		}
		// A restarted old keeper is a standby.
		restarted := env.startKeeper(env.keeperConfig("a"))
		time.Sleep(500 * time.Millisecond)
		if _, ok := restarted.activeEpoch(time.Now()); ok {
			t.Fatal("the restarted old keeper became active while the new one renews")
		}

		watch := map[string]time.Time{"at-kill": {}, "before-kill": {}}
		lastKeepAlive := map[string]time.Time{"at-kill": time.Unix(0, lastAtKill.Load()), "before-kill": t0}
		ttls := map[string]time.Duration{"at-kill": 2 * time.Second, "before-kill": 4 * time.Second}
		for len(watch) > 0 {
			now := time.Now()
			if !env.keyExists(ctx, "throughout") {
				t.Fatalf("the lease kept alive through the failover expired (last keep-alive %v ago)", now.Sub(time.Unix(0, lastThroughout.Load())))
			}
			for key := range watch {
				age := now.Sub(lastKeepAlive[key])
				if !env.keyExists(ctx, key) {
					if age < ttls[key] {
						t.Fatalf("%s expired early: %v after its last keep-alive, TTL %v", key, age, ttls[key])
					}
					t.Logf("%s expired %v after its last keep-alive (TTL %v)", key, age, ttls[key])
					delete(watch, key)
				} else if age > ttls[key]+3*time.Second {
					t.Fatalf("%s survives %v after its last keep-alive, TTL %v", key, age, ttls[key])
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		close(stopThroughout)
		wg.Wait()
		if !env.keyExists(ctx, "throughout") {
			t.Fatal("the lease kept alive through the failover expired")
		}
	})
}

// TestStaleKeeperIsFenced: a keeper that is cut off from the claim and wrongly believes it is still active (a
// paused process, a broken clock) cannot revoke anything once a standby has taken over: storage refuses its
// revoke, the lease and its key stay, and the keeper stands by.
func TestStaleKeeperIsFenced(t *testing.T) {
	for _, mode := range claimModes() {
		t.Run(mode.name, func(t *testing.T) { testStaleKeeperIsFenced(t, mode) })
	}
}

func testStaleKeeperIsFenced(t *testing.T, mode claimMode) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: takeover timings on the bubble's fake clock
		env := mode.env(newBubbleEnv(t, 1))
		a := env.startKeeper(env.keeperConfig("a"))
		waitActive(t, a, 5*time.Second)
		bConfig := env.keeperConfig("b")
		if mode.peers {
			bConfig.PeerURLs = []string{bConfig.ListenURL} // cut off from a as well: a's answers never reach b
		}
		b := env.startKeeper(bConfig)
		ctx := ctxT(t, 30*time.Second)
		g, err := env.leaseClient(t, a).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 30})
		if err != nil {
			t.Fatal(err)
		}
		env.put(ctx, "fenced/k", g.ID)
		a.pauseElection.Store(true)
		a.role.mu.Lock()
		a.role.activeUntil = time.Now().Add(time.Hour)
		a.role.mu.Unlock()
		waitActive(t, b, 5*time.Second)
		if _, ok := a.activeEpoch(time.Now()); !ok {
			t.Fatal("the cut-off keeper should still believe it is active")
		}
		// a's clock runs fast: the lease expires on it now, and it proposes the revoke.
		a.table.mu.Lock()
		now := time.Now()
		a.table.startClock(a.table.leases[g.ID], now, now)
		a.table.mu.Unlock()
		waittest.Until(t, 5*time.Second, 10*time.Millisecond, "the stale keeper to stand by after a refused revoke", func() bool {
			_, ok := a.activeEpoch(time.Now())
			return !ok
		})
		if !env.keyExists(ctx, "fenced/k") {
			t.Fatal("the stale keeper's revoke deleted the key")
		}
		if ttl, err := b.Renew(ctx, g.ID); err != nil || ttl != 30 {
			t.Fatalf("keep-alive on the new keeper: %d, %v", ttl, err)
		}
	})
}

// TestStopHandsOver: a keeper that stops cleanly releases the claim, and the standby takes over without waiting
// for the takeover timeout.
func TestStopHandsOver(t *testing.T) {
	for _, mode := range claimModes() {
		t.Run(mode.name, func(t *testing.T) { testStopHandsOver(t, mode) })
	}
}

func testStopHandsOver(t *testing.T, mode claimMode) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: takeover timings on the bubble's fake clock
		env := mode.env(newBubbleEnv(t, 1))
		a := env.startKeeper(env.keeperConfig("a"))
		waitActive(t, a, 5*time.Second)
		b := env.startKeeper(env.keeperConfig("b"))
		ctx := ctxT(t, 10*time.Second)
		g, err := env.leaseClient(t, a).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 30})
		if err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		if err := a.Stop(ctx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		// Within the standby's next look at the claim, not after the takeover timeout.
		waitActive(t, b, 2*b.cfg.RenewInterval)
		t.Logf("standby active %v after the stop", time.Since(stopped))
		if ttl, err := b.Renew(ctx, g.ID); err != nil || ttl != 30 {
			t.Fatalf("keep-alive on the new keeper: %d, %v", ttl, err)
		}
	})
}

// TestRestartedKeeperLetsTheStandbyWin: when the active keeper crashes and its supervisor starts it again at
// once (on the same address), the standby that watched the holder takes over (with peers: at once), and a keeper started after the crash waits twice the
// takeover timeout from its first look at the claim before it claims the role itself.
func TestRestartedKeeperLetsTheStandbyWin(t *testing.T) {
	tests := []struct {
		name        string
		withStandby bool
	}{
		{"the standby takes over", true},
		{"alone, the restarted keeper waits twice the timeout", false},
	}
	for _, mode := range claimModes() {
		for _, tt := range tests {
			t.Run(mode.name+"/"+tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { // time is the subject: takeover timings on the bubble's fake clock
					env := mode.env(newBubbleEnv(t, 1))
					a := env.startKeeper(env.keeperConfig("a"))
					waitActive(t, a, 5*time.Second)
					var b *Keeper
					if tt.withStandby {
						b = env.startKeeper(env.keeperConfig("b"))
						time.Sleep(500 * time.Millisecond) // b has read the claim
					}
					a.Crash()
					restarted := env.startKeeper(env.keeperConfig("a"))
					started := time.Now()
					if tt.withStandby {
						// With peers the standby sees the restarted keeper answer that it is not the holder
						// it watched, and claims at once.
						_, latest := mode.takeover(b.cfg)
						waitActive(t, b, latest)
						time.Sleep(time.Second)
						if _, ok := restarted.activeEpoch(time.Now()); ok {
							t.Fatal("the restarted keeper took the role from the standby")
						}
						return
					}
					// It looks at the claim every RenewInterval: it claims within one of them after twice the timeout.
					waitActive(t, restarted, 2*restarted.cfg.TakeoverTimeout+2*restarted.cfg.RenewInterval)
					if waited := time.Since(started); waited < 2*restarted.cfg.TakeoverTimeout {
						t.Fatalf("the restarted keeper claimed after %v, want at least twice the takeover timeout %v", waited, restarted.cfg.TakeoverTimeout)
					}
				})
			})
		}
	}
}

// claimMode is one of the two ways the active keeper holds the claim.
type claimMode struct {
	name string
	// peers: the keepers know each other (Config.PeerURLs); the holder confirms its claim by linearizable
	// reads and the standbys ask the peers whether it is alive. Otherwise it renews the claim through the log.
	peers bool
}

func claimModes() []claimMode {
	return []claimMode{{"log renewals", false}, {"peers", true}}
}

// env makes env's keepers a and b peers in the peers mode.
func (m claimMode) env(env *testEnv) *testEnv {
	if m.peers {
		return env.withPeers("a", "b")
	}
	return env
}

// takeover is when the standby takes over after the active keeper is killed. With log renewals: it saw the
// holder's last renewal at most one RenewInterval after it was made (the holder renews every RenewInterval) and
// looks at the claim every RenewInterval, so it claims between one interval before and two after
// TakeoverTimeout from the kill, never earlier. With peers: the killed holder's address refuses the standby's
// next health check (or the one after, if the first found the old connection closing), and the standby claims at
// once; the next check comes at most one stretched wait (newStandbyPace) after the kill, the one after that one
// RenewInterval later.
func (m claimMode) takeover(cfg Config) (earliest, latest time.Duration) {
	if m.peers {
		return 0, (standbyStretch + 2) * cfg.RenewInterval
	}
	return cfg.TakeoverTimeout - cfg.RenewInterval, cfg.TakeoverTimeout + 2*cfg.RenewInterval
}

// TestIdleClaimWritesNothing: with peers, an active keeper and a standby with nothing to do write nothing to
// the log (the claim is confirmed by reads); with log renewals they write one entry per RenewInterval.
func TestIdleClaimWritesNothing(t *testing.T) {
	for _, mode := range claimModes() {
		t.Run(mode.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { // time is the subject: renewals on the bubble's fake clock
				env := mode.env(newBubbleEnv(t, 1))
				a := env.startKeeper(env.keeperConfig("a"))
				waitActive(t, a, 5*time.Second)
				b := env.startKeeper(env.keeperConfig("b"))
				ctx := ctxT(t, 30*time.Second)
				time.Sleep(time.Second) // b has read the claim; a's first checkpoints and reconciliation are done
				before, err := env.store.KeeperStatus(ctx)
				if err != nil {
					t.Fatal(err)
				}
				const idle = 5 * time.Second
				time.Sleep(idle)
				after, err := env.store.KeeperStatus(ctx)
				if err != nil {
					t.Fatal(err)
				}
				written := after.AppliedIndex - before.AppliedIndex
				t.Logf("%d log entries in %v idle (%s)", written, idle, keeperclaim.Describe(after))
				switch {
				case mode.peers && written != 0:
					t.Fatalf("%d log entries in %v with an idle active keeper and standby, want none", written, idle)
				case !mode.peers && written < uint64(idle/a.cfg.RenewInterval)/2:
					t.Fatalf("%d log entries in %v: the claim renewals through the log are missing", written, idle)
				}
				if !a.Active() || b.Active() {
					t.Fatalf("after %v idle: a active %v, b active %v; want a alone", idle, a.Active(), b.Active())
				}
			})
		})
	}
}

// TestHolderCutOffFromStandbyKeepsLeases: with peers, a standby that cannot reach the holder (the holder itself
// is fine) takes over; the old holder serves keep-alives until its next confirmation shows the takeover, then
// stands by, and no lease it kept alive in that window expires before its TTL on the new keeper.
func TestHolderCutOffFromStandbyKeepsLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: takeover timings on the bubble's fake clock
		env := newBubbleEnv(t, 1).withPeers("a", "b")
		a := env.startKeeper(env.keeperConfig("a"))
		waitActive(t, a, 5*time.Second)
		bConfig := env.keeperConfig("b")
		bConfig.PeerURLs = []string{bConfig.ListenURL} // a's answers never reach b
		b := env.startKeeper(bConfig)
		ctx := ctxT(t, 30*time.Second)
		const ttl = 2
		g, err := env.leaseClient(t, a).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		env.put(ctx, "window/k", g.ID)
		// Keep the lease alive on a alone until a stops serving it.
		var lastServed time.Time
		for {
			sent := time.Now()
			if renewed, err := a.Renew(ctx, g.ID); err != nil || renewed <= 0 {
				t.Logf("a stopped serving (b active: %v): %d, %v", b.Active(), renewed, err)
				break
			}
			lastServed = sent
			time.Sleep(100 * time.Millisecond)
		}
		if !b.Active() {
			t.Fatal("a stopped serving but b is not active")
		}
		if a.Active() {
			t.Fatal("a still active after the takeover")
		}
		// The lease a renewed last at lastServed lives on b until at least lastServed + TTL.
		time.Sleep(time.Until(lastServed.Add(ttl*time.Second - 50*time.Millisecond)))
		if !env.keyExists(ctx, "window/k") {
			t.Fatalf("the lease a kept alive expired %v after its last keep-alive, TTL %ds", time.Since(lastServed), ttl)
		}
		waittest.Until(t, 10*time.Second, 20*time.Millisecond, "the abandoned lease to expire on b", func() bool {
			return !env.keyExists(ctx, "window/k")
		})
		t.Logf("expired %v after its last keep-alive on the old holder", time.Since(lastServed))
	})
}
