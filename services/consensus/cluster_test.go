package consensus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/testing/memnet"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
)

// readLog reads a member's committed log from index 1 up to and including upTo.
func readLog(t *testing.T, n *consensus.Node, upTo uint64) []commitlog.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	log, err := consensustest.ReadLog(ctx, n, upTo)
	if err != nil {
		t.Fatalf("member %x: %v", n.ID(), err)
	}
	return log
}

// proposeAll proposes count unique entries from workers goroutines, spread over the given members, and
// waits until each committed on the member it was proposed to; a refused or lost proposal is retried. It
// returns the payloads and the highest commit index seen.
func proposeAll(t *testing.T, members []*consensustest.Member, count, workers int, prefix string) (map[string]bool, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	commits := make([]*consensustest.Commits, len(members))
	for i, m := range members {
		commits[i] = consensustest.WatchCommits(ctx, m.Node())
	}
	var mu sync.Mutex
	payloads := map[string]bool{}
	var highest uint64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			which := w % len(members)
			for i := w; i < count; i += workers {
				data := fmt.Appendf(nil, "%s-%06d", prefix, i)
				index, err := commits[which].ProposeUntilCommitted(ctx, members[which].Node(), data, time.Second)
				if err != nil {
					errs <- fmt.Errorf("proposal %s: %w", data, err)
					return
				}
				mu.Lock()
				payloads[string(data)] = true
				highest = max(highest, index)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return payloads, highest
}

func TestThreeMembersElectALeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: the election on the bubble's fake clock
		started := time.Now()
		c := consensustest.Start(t, consensustest.Options{Network: memnet.New()})
		leader := c.WaitLeader(5 * time.Second)
		// Nobody campaigns before its randomized election timeout ([1, 2) ElectionTimeout) has passed; the first
		// to time out wins unless all three tie, when another round follows. Messages take no fake time.
		opts := c.Options()
		if took := time.Since(started); took < opts.ElectionTimeout || took > 4*opts.ElectionTimeout+opts.HeartbeatInterval {
			t.Fatalf("leader after %v, want within [1, 4] election timeouts (%v)", took, opts.ElectionTimeout)
		}
		st, err := leader.Node().Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Leader != leader.Node().ID() || st.Term == 0 || len(st.Members) != 3 {
			t.Fatalf("leader status = %+v, want itself as leader, a term, 3 members", st)
		}
		// Every member publishes its attributes (name, storage URL) through raft.
		c.WaitPublished(5 * time.Second)
	})
}

func TestMemberIsHealthyOnlyOnceItHasPublishedItself(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{})
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "every member healthy", func() bool {
		healthy := 0
		for _, m := range c.Running() {
			n := m.Node()
			if n.Health(context.Background()) != nil {
				continue
			}
			healthy++
			st, err := n.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, member := range st.Members {
				if member.ID == n.ID() && (member.Name != m.Name || member.StorageURL == "") {
					t.Fatalf("%s is healthy before its attributes are in the membership: %+v", m.Name, member)
				}
			}
		}
		return healthy == len(c.Running())
	})
}

func TestProposalsCommitInTheSameOrderEverywhere(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{})
	payloads, highest := proposeAll(t, c.Members(), 10000, 16, "order")
	if len(payloads) != 10000 {
		t.Fatalf("%d distinct payloads committed, want 10000", len(payloads))
	}
	var logs [][]commitlog.Entry
	for _, m := range c.Members() {
		logs = append(logs, readLog(t, m.Node(), highest))
	}
	seen := map[string]bool{}
	for i, e := range logs[0] {
		if e.Index != uint64(i+1) {
			t.Fatalf("entry %d has index %d: the log has a hole", i+1, e.Index)
		}
		for m := 1; m < len(logs); m++ {
			o := logs[m][i]
			if o.Index != e.Index || o.Term != e.Term || o.Kind != e.Kind || string(o.Data) != string(e.Data) {
				t.Fatalf("index %d differs: member 1 has %d/%d/%v/%q, member %d has %d/%d/%v/%q", e.Index,
					e.Index, e.Term, e.Kind, e.Data, m+1, o.Index, o.Term, o.Kind, o.Data)
			}
		}
		if e.Kind == commitlog.KindNormal {
			seen[string(e.Data)] = true
		}
	}
	for p := range payloads {
		if !seen[p] {
			t.Fatalf("acknowledged payload %q is not in the log", p)
		}
	}
}

func TestProposeWithoutLeaderFailsFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: losing the leader, failing fast
		c := consensustest.Start(t, consensustest.Options{Network: memnet.New()})
		members := c.Members()
		members[1].Kill()
		members[2].Kill()
		n := members[0].Node()
		waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the lone member to lose its leader", func() bool {
			return n.Leader() == 0
		})
		start := time.Now()
		err := n.Propose(context.Background(), []byte("x"))
		if !errors.Is(err, rpctypes.ErrGRPCNoLeader) {
			t.Fatalf("Propose without leader = %v, want %v", err, rpctypes.ErrGRPCNoLeader)
		}
		if _, err := n.ReadIndex(context.Background()); !errors.Is(err, rpctypes.ErrGRPCNoLeader) {
			t.Fatalf("ReadIndex without leader = %v, want %v", err, rpctypes.ErrGRPCNoLeader)
		}
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Fatalf("failing took %v, want fast", took)
		}
	})
}

func TestReadIndexCoversEveryAcknowledgedWrite(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{})
	leader := c.WaitLeader(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	commits := consensustest.WatchCommits(ctx, leader.Node())
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				index, err := commits.ProposeUntilCommitted(ctx, leader.Node(), fmt.Appendf(nil, "read-%d-%d", w, i), time.Second)
				if err != nil {
					t.Errorf("propose: %v", err)
					return
				}
				// A read barrier taken after the write was acknowledged must cover it, on every member.
				for _, m := range c.Members() {
					read, err := m.Node().ReadIndex(ctx)
					if err != nil {
						t.Errorf("%s ReadIndex: %v", m.Name, err)
						return
					}
					if read < index {
						t.Errorf("%s ReadIndex = %d after index %d was acknowledged", m.Name, read, index)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestRemovedMemberThatWasDownStopsWhenItReturns(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{})
	c.WaitHealthy(10 * time.Second)
	leader := c.WaitLeader(5 * time.Second)
	gone := others(c, leader)[0]
	id := gone.Node().ID()
	gone.Kill()
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the leader to see the member down", func() bool {
		return leader.Node().PeerActiveSince(id).IsZero()
	})
	if _, err := leader.Node().MemberRemove(context.Background(), &etcdserverpb.MemberRemoveRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	if err := gone.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone.Node().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a removed member that restarted kept running")
	}
	if !errors.Is(gone.Node().Err(), consensus.ErrRemoved) {
		t.Fatalf("it stopped with %v, want ErrRemoved", gone.Node().Err())
	}
}

func TestStoppingLeaderHandsOverLeadership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: no election timeout may pass
		c := consensustest.Start(t, consensustest.Options{Network: memnet.New()})
		c.WaitHealthy(10 * time.Second)
		old := c.WaitLeader(5 * time.Second)
		old.Stop()
		// No election timeout has to pass: a survivor already leads when Stop returns.
		leads := false
		for _, m := range others(c, old) {
			leads = leads || m.Node().Leader() == m.Node().ID()
		}
		if !leads {
			t.Fatal("no survivor leads right after the leader stopped")
		}
	})
}
