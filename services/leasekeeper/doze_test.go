package leasekeeper

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestIdleHolderDozesAndWakes: with peers, a holder with no lease and no call stops confirming its claim (no
// ReadIndex rounds while idle), stays the active keeper for the standby and the frontends, serves the next call
// after one confirmation, and confirms again while it has a lease; a standby still takes over at once when a
// dozing holder is killed.
func TestIdleHolderDozesAndWakes(t *testing.T) {
	for _, tc := range []struct {
		name string
		// act is what happens to the dozing holder a; it returns b's expected role afterwards.
		act func(t *testing.T, env *testEnv, a, b *Keeper)
	}{
		{"a call wakes it", func(t *testing.T, env *testEnv, a, b *Keeper) {
			ctx := ctxT(t, 30*time.Second)
			g, err := env.leaseClient(t, a).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 5})
			if err != nil {
				t.Fatalf("grant on the dozing holder: %v", err)
			}
			woke := confirmations(a)
			time.Sleep(time.Second)
			if n := confirmations(a) - woke; n < 3 {
				t.Fatalf("%v confirmations in 1s with a lease, want one every %v", n, a.cfg.RenewInterval)
			}
			if _, err := env.leaseClient(t, a).LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: g.ID}); err != nil {
				t.Fatal(err)
			}
			if b.Active() {
				t.Fatal("the standby took over from a holder that woke")
			}
		}},
		{"a call that grants nothing wakes it", func(t *testing.T, env *testEnv, a, b *Keeper) {
			if _, err := env.leaseClient(t, a).LeaseLeases(ctxT(t, 30*time.Second), &pb.LeaseLeasesRequest{}); err != nil {
				t.Fatalf("leases on the dozing holder: %v", err)
			}
			woke := confirmations(a)
			time.Sleep(time.Second)
			if n := confirmations(a) - woke; n < 3 {
				t.Fatalf("%v confirmations in 1s after a call, want one every %v until it dozes again", n, a.cfg.RenewInterval)
			}
			time.Sleep(dozeAfter + time.Second)
			dozing := confirmations(a)
			time.Sleep(time.Second)
			if n := confirmations(a) - dozing; n != 0 {
				t.Fatalf("%v confirmations in 1s, %v after the call, want none", n, dozeAfter+time.Second)
			}
		}},
		{"a kill -9 hands over at once", func(t *testing.T, env *testEnv, a, b *Keeper) {
			killed := time.Now()
			a.Crash()
			_, latest := claimMode{peers: true}.takeover(b.cfg)
			waitActive(t, b, latest)
			t.Logf("standby active %v after the kill of a dozing holder", time.Since(killed))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { // time is the subject: the doze on the bubble's fake clock
				env := newBubbleEnv(t, 1).withPeers("a", "b")
				a := env.startKeeper(env.keeperConfig("a"))
				waitActive(t, a, 5*time.Second)
				b := env.startKeeper(env.keeperConfig("b"))
				time.Sleep(dozeAfter + time.Second)
				dozing := confirmations(a)
				time.Sleep(2 * time.Second)
				if n := confirmations(a) - dozing; n != 0 {
					t.Fatalf("%v confirmations in 2s from an idle holder, want none", n)
				}
				if !a.Active() || b.Active() {
					t.Fatalf("idle: a active %v, b active %v; want a alone", a.Active(), b.Active())
				}
				tc.act(t, env, a, b)
			})
		})
	}
}

func confirmations(k *Keeper) float64 { return testutil.ToFloat64(k.metrics.confirmations) }
