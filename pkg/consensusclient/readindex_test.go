package consensusclient_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cairn-kv/cairn/pkg/consensusclient"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
)

// TestReadIndexSharesRoundsAndStaysLinearizable checks both halves of the batching promise: concurrent
// callers share RPCs, and every caller's index covers every write committed before it called.
func TestReadIndexSharesRoundsAndStaysLinearizable(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{ConsensusAPI: true})
	leader := c.WaitLeader(5 * time.Second)
	var rpcs atomic.Int64
	count := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/ReadIndex") {
			rpcs.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	var follower *consensustest.Member
	for _, m := range c.Members() {
		if m != leader {
			follower = m
		}
	}
	// Reads through a follower, writes through the leader: the follower's index must still cover the writes.
	reader, err := consensusclient.New(consensusclient.Config{Target: "http://" + follower.APIAddr, DialOptions: []grpc.DialOption{count}})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	writer := dial(t, leader)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	commits := consensustest.WatchCommits(ctx, writer)

	const callers, rounds = 32, 20
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			for i := range rounds {
				committed, err := commits.Propose(ctx, writer, fmt.Appendf(nil, "read-%d-%d", w, i))
				if err != nil {
					t.Errorf("propose: %v", err)
					return
				}
				index, err := reader.ReadIndex(ctx)
				if err != nil {
					t.Errorf("read index: %v", err)
					return
				}
				if index < committed {
					t.Errorf("read index %d after the write committed at %d", index, committed)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	before := rpcs.Load()
	for range 200 {
		wg.Go(func() {
			if _, err := reader.ReadIndex(ctx); err != nil {
				t.Errorf("read index: %v", err)
			}
		})
	}
	wg.Wait()
	if shared := rpcs.Load() - before; shared > 20 {
		t.Errorf("200 concurrent ReadIndex calls made %d RPCs; they should share a few rounds", shared)
	}
	t.Logf("%d calls in all made %d ReadIndex RPCs", callers*rounds+200, rpcs.Load())
}
