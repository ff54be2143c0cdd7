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

	"github.com/cairn-kv/cairn/internal/keeperclaim"
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

// TestExpiryStorm grants many leases (each with a key), makes them all expire at the same instant on the
// keeper's clock, and checks that they are revoked no faster than RevokeRate per second (in paced batches,
// etcd's leaseRevokeRate) yet all within the time that rate needs, while a concurrent writer's puts keep being
// served promptly. The upper bounds allow for the machine: the time the rate needs plus what this run took to
// grant the leases (as many writes again), and the writer's p99 within 500 ms plus twice its p99 before the
// storm; on a quiet machine both are the rate's and 500 ms.
func TestExpiryStorm(t *testing.T) {
	leases := stormLeases(t)
	env := newTestEnv(t, 1)
	cfg := env.keeperConfig("a")
	k := env.startKeeper(cfg)
	waitActive(t, k, 5*time.Second)
	lc := env.leaseClient(t, k)
	ctx := ctxT(t, 10*time.Minute)

	const ttl = 3600 // nothing expires while granting; the storm is set off below
	const grantWorkers = 32
	granting := time.Now()
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
	granted := time.Since(granting)
	t.Logf("granted %d leases with keys in %v", leases, granted)
	before, err := writeLatencies(ctx, env, 50)
	if err != nil {
		t.Fatalf("writer before the storm: %v", err)
	}
	k.table.mu.Lock()
	expiredAt := time.Now()
	for _, l := range k.table.leases {
		k.table.startClock(l, expiredAt, expiredAt)
	}
	k.table.mu.Unlock()

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

	rate := cfg.WithDefaults().RevokeRate
	needs := time.Duration(leases) * time.Second / time.Duration(rate)
	var took time.Duration
	for {
		n := countKeys(ctx, t, env, "storm/")
		took = time.Since(expiredAt)
		if n == 0 {
			break
		}
		if took > needs*3/2+5*time.Second+granted {
			t.Fatalf("%d of %d storm keys left after %v; the rate allows all in %v (granting them took %v)", n,
				leases, took, needs, granted)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stopWriter)
	if err := <-writerDone; err != nil {
		t.Fatalf("writer during the storm: %v", err)
	}
	minTook := time.Duration(leases-rate/5) * time.Second / time.Duration(rate) // less the limiter's burst
	t.Logf("revoked %d leases expired at once in %v (rate limit %d/s); writer: %d puts, p99 %v, max %v (before the storm: p99 %v)",
		leases, took, rate, len(latencies), percentile(latencies, 0.99), percentile(latencies, 1), percentile(before, 0.99))
	if took < minTook {
		t.Fatalf("storm revoked in %v, faster than the %d/s limit allows (%v)", took, rate, minTook)
	}
	stalled := 500*time.Millisecond + 2*percentile(before, 0.99)
	if p99 := percentile(latencies, 0.99); len(latencies) < 10 || p99 > stalled {
		t.Fatalf("writes stalled during the storm: %d puts, p99 %v (over %v)", len(latencies), p99, stalled)
	}
}

// writeLatencies times n puts of the storm's writer, one every 5 ms.
func writeLatencies(ctx context.Context, env *testEnv, n int) ([]time.Duration, error) {
	var latencies []time.Duration
	for i := range n {
		start := time.Now()
		if _, err := env.store.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("writer/%d", i%100)), Value: []byte("v")}); err != nil {
			return nil, err
		}
		latencies = append(latencies, time.Since(start))
		time.Sleep(5 * time.Millisecond)
	}
	return latencies, nil
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
