package leasekeeper

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/pkg/keeperclaim"
)

// stormLeases is the size of the expiry storm: 3000 by default, CAIRN_LEASE_STORM (e.g. 100000) to change it.
func stormLeases(t *testing.T) int {
	if v := os.Getenv("CAIRN_LEASE_STORM"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("CAIRN_LEASE_STORM=%q: want a positive count", v)
		}
		return n
	}
	return 3000
}

// TestExpiryStorm grants many leases (each with a key) that expire together, and checks that they are revoked
// no faster than RevokeRate per second (in paced batches, etcd's leaseRevokeRate) yet all within the time that
// rate needs, while a concurrent writer's puts keep being served promptly. The TTL is about as long as granting
// takes, so the leases' deadlines fall within one TTL of each other, when granting ends.
func TestExpiryStorm(t *testing.T) {
	leases := stormLeases(t)
	env := newTestEnv(t, 1)
	cfg := env.keeperConfig("a")
	k := env.startKeeper(cfg)
	waitActive(t, k, 5*time.Second)
	lc := leaseClient(t, k)
	ctx := ctxT(t, 10*time.Minute)

	ttl := max(2, int64(leases/5000))
	const grantWorkers = 32
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, grantWorkers)
	for range grantWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(leases); i = next.Add(1) {
				g, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: i, TTL: ttl})
				for retries := 0; keeperclaim.IsNotActive(err) && retries < 100; retries++ {
					// The claim renewal lapsed under this load; the frontend would retry too.
					time.Sleep(50 * time.Millisecond)
					g, err = lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: i, TTL: ttl})
				}
				if err == nil {
					_, err = env.store.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("storm/%08d", i)), Lease: g.ID})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	granted := time.Now()
	t.Logf("granted %d leases with keys", leases)

	// A writer keeps putting while the storm is revoked.
	stopWriter := make(chan struct{})
	var latencies []time.Duration
	writerDone := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stopWriter:
				writerDone <- nil
				return
			default:
			}
			start := time.Now()
			if _, err := env.store.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("writer/%d", i%100)), Value: []byte("v")}); err != nil {
				writerDone <- err
				return
			}
			latencies = append(latencies, time.Since(start))
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// Measured from the first count after granting (leases granted first may be revoked already).
	var firstRevoke, lastRevoke time.Time
	var atFirst int64
	for {
		n := countKeys(ctx, t, env, "storm/")
		now := time.Now()
		if n < int64(leases) && firstRevoke.IsZero() {
			firstRevoke, atFirst = now, n
		}
		if n == 0 {
			lastRevoke = now
			break
		}
		if now.Sub(granted) > seconds(ttl)+10*time.Second+time.Duration(leases)*time.Second/time.Duration(cfg.WithDefaults().RevokeRate)*2 {
			t.Fatalf("%d of %d storm keys left after %v", n, leases, now.Sub(granted))
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stopWriter)
	if err := <-writerDone; err != nil {
		t.Fatalf("writer during the storm: %v", err)
	}
	rate := cfg.WithDefaults().RevokeRate
	took := lastRevoke.Sub(firstRevoke)
	minTook := time.Duration(int(atFirst)-rate/5-rate/2) * time.Second / time.Duration(rate) // burst and polling slack
	t.Logf("revoked the last %d of %d leases in %v (rate limit %d/s); writer: %d puts, p99 %v, max %v", atFirst, leases,
		took, rate, len(latencies), percentile(latencies, 0.99), percentile(latencies, 1))
	if took < minTook {
		t.Fatalf("storm revoked in %v, faster than the %d/s limit allows (%v)", took, rate, minTook)
	}
	if p99 := percentile(latencies, 0.99); len(latencies) < 10 || p99 > 500*time.Millisecond {
		t.Fatalf("writes stalled during the storm: %d puts, p99 %v", len(latencies), p99)
	}
}

func countKeys(ctx context.Context, t *testing.T, env *testEnv, prefix string) int64 {
	t.Helper()
	resp, err := env.store.Range(ctx, &pb.RangeRequest{Key: []byte(prefix), RangeEnd: []byte(prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1)), CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}
