package consensusclient_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/consensusclient"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
)

var (
	_ consensusclient.Membership = (*consensus.Node)(nil)
	_ commitlog.Log              = (*consensusclient.Client)(nil)
	_ commitlog.AsyncProposer    = (*consensusclient.Client)(nil)
)

func dial(t *testing.T, m *consensustest.Member) *consensusclient.Client {
	t.Helper()
	c, err := consensusclient.New(consensusclient.Config{Target: "http://" + m.APIAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// collect reads a log through Committed from index 1 until it has seen upTo.
func collect(t *testing.T, log commitlog.Log, upTo uint64) []commitlog.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	entries, err := consensustest.ReadLog(ctx, log, upTo)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func TestRemoteLogBehavesLikeTheNode(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{ConsensusAPI: true})
	leader := c.WaitLeader(5 * time.Second)
	var clients []*consensusclient.Client
	for _, m := range c.Members() {
		clients = append(clients, dial(t, m))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	commits := consensustest.WatchCommits(ctx, clients[0])
	var wg sync.WaitGroup
	var highest uint64
	var mu sync.Mutex
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				// Under load a spurious election drops the proposals in flight without an error: propose
				// again, as etcd's clients do after a timeout.
				index, err := commits.ProposeUntilCommitted(ctx, clients[w%len(clients)], fmt.Appendf(nil, "remote-%d-%d", w, i), 2*time.Second)
				if err != nil {
					t.Errorf("propose: %v", err)
					return
				}
				mu.Lock()
				highest = max(highest, index)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	remote := collect(t, clients[1], highest)
	local := collect(t, leader.Node(), highest)
	if len(remote) != len(local) {
		t.Fatalf("remote log has %d entries, in-process %d", len(remote), len(local))
	}
	for i := range local {
		r, l := remote[i], local[i]
		if r.Index != l.Index || r.Term != l.Term || r.Kind != l.Kind || string(r.Data) != string(l.Data) {
			t.Fatalf("entry %d differs: remote %+v, in-process %+v", l.Index, r, l)
		}
	}

	// A follower applies what the leader acknowledged a moment later: wait for it, boundedly.
	st, err := clients[2].Status(ctx)
	for deadline := time.Now().Add(5 * time.Second); err == nil && st.AppliedIndex < highest && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		st, err = clients[2].Status(ctx)
	}
	if err != nil || st.Leader != leader.Node().ID() || len(st.Members) != 3 || st.AppliedIndex < highest {
		t.Fatalf("remote Status = %+v, %v; want applied index %d", st, err, highest)
	}
	index, err := clients[2].ReadIndex(ctx)
	if err != nil || index < highest {
		t.Fatalf("remote ReadIndex = %d, %v; want at least %d", index, err, highest)
	}
	if err := clients[0].Compact(ctx, highest); err != nil {
		t.Fatalf("remote Compact: %v", err)
	}
	list, err := clients[1].MemberList(ctx, &etcdserverpb.MemberListRequest{Linearizable: true})
	if err != nil || len(list.GetMembers()) != 3 || list.GetHeader().GetClusterId() != leader.Node().ClusterID() {
		t.Fatalf("remote MemberList = %v, %v", list, err)
	}
}

func TestRemoteErrorsAreEtcds(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{ConsensusAPI: true, Configure: func(cfg *consensus.Config) {
		cfg.MaxRequestBytes = 1024
	}})
	leader := c.WaitLeader(5 * time.Second)
	client := dial(t, leader)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"proposal too large", func() error { return client.Propose(ctx, make([]byte, 2048)) }, rpctypes.ErrGRPCRequestTooLarge},
		{"empty proposal", func() error { return client.Propose(ctx, nil) }, consensus.ErrEmptyProposal},
		{"proposal accepted, not waited for", func() error { return proposeThen(t, client, ctx, []byte("x")) }, nil},
		{"proposal too large, not waited for", func() error { return proposeThen(t, client, ctx, make([]byte, 2048)) },
			rpctypes.ErrGRPCRequestTooLarge},
		{"empty proposal, not waited for", func() error { return proposeThen(t, client, ctx, nil) }, consensus.ErrEmptyProposal},
		{"proposal whose context ended, not waited for", func() error {
			ended, cancel := context.WithCancel(ctx)
			cancel()
			return proposeThen(t, client, ended, []byte("x"))
		}, context.Canceled},
		{"remove an unknown member", func() error {
			_, err := client.MemberRemove(ctx, &etcdserverpb.MemberRemoveRequest{ID: 42})
			return err
		}, rpctypes.ErrGRPCMemberNotFound},
		{"move leadership to an unknown member", func() error {
			_, err := client.MoveLeader(ctx, &etcdserverpb.MoveLeaderRequest{TargetID: 42})
			return err
		}, rpctypes.ErrGRPCBadLeaderTransferee},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("no leader", func(t *testing.T) {
		for _, m := range c.Members() {
			if m != leader {
				m.Kill()
			}
		}
		waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the leader to step down", func() bool {
			return leader.Node().Leader() == 0
		})
		if err := client.Propose(ctx, []byte("x")); !errors.Is(err, rpctypes.ErrGRPCNoLeader) {
			t.Fatalf("Propose = %v, want %v", err, rpctypes.ErrGRPCNoLeader)
		}
		if err := proposeThen(t, client, ctx, []byte("x")); !errors.Is(err, rpctypes.ErrGRPCNoLeader) {
			t.Fatalf("ProposeThen = %v, want %v", err, rpctypes.ErrGRPCNoLeader)
		}
		if _, err := client.ReadIndex(ctx); !errors.Is(err, rpctypes.ErrGRPCNoLeader) {
			t.Fatalf("ReadIndex = %v, want %v", err, rpctypes.ErrGRPCNoLeader)
		}
	})
}

func TestRemoteCommittedResumesAfterTheMemberRestarts(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{ConsensusAPI: true})
	leader := c.WaitLeader(5 * time.Second)
	var follower *consensustest.Member
	for _, m := range c.Members() {
		if m != leader {
			follower = m
		}
	}
	client := dial(t, follower)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var seen []commitlog.Entry
	go func() {
		_ = client.Committed(ctx, 1, func(batch []commitlog.Entry) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, batch...)
			return nil
		})
	}()
	commits := consensustest.WatchCommits(ctx, leader.Node())
	propose := func(prefix string) uint64 {
		var last uint64
		for i := range 50 {
			index, err := commits.ProposeUntilCommitted(ctx, leader.Node(), fmt.Appendf(nil, "%s-%d", prefix, i), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			last = index
		}
		return last
	}
	propose("before")
	follower.Stop()
	last := propose("during")
	if err := follower.Restart(); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, "the remote stream to resume past the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0 && seen[len(seen)-1].Index >= last
	})
	mu.Lock()
	defer mu.Unlock()
	for i, e := range seen {
		if e.Index != uint64(i+1) {
			t.Fatalf("position %d holds index %d: the resumed stream skipped or repeated entries", i, e.Index)
		}
	}
}

// proposeThen proposes data with ProposeThen and waits for its one answer.
func proposeThen(t *testing.T, client *consensusclient.Client, ctx context.Context, data []byte) error {
	t.Helper()
	answers := make(chan error, 2)
	client.ProposeThen(ctx, data, func(err error) { answers <- err })
	select {
	case err := <-answers:
		select {
		case again := <-answers:
			t.Fatalf("ProposeThen answered twice: %v, then %v", err, again)
		case <-time.After(20 * time.Millisecond):
		}
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("ProposeThen did not answer within 10s")
		return nil
	}
}
