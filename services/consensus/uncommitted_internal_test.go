package consensus

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// TestLeaderTakesABurstOfLargeProposals checks that a leader configured as Cairn configures raft takes what
// 1000 clients' puts have in flight at once, as etcd (which sets no bound) does, and still refuses an
// uncommitted tail past its bound (a leader without a quorum must not buffer without limit). Under 64 MiB,
// 1000 clients' 100 KiB puts were refused with "too many requests" on a healthy cluster.
func TestLeaderTakesABurstOfLargeProposals(t *testing.T) {
	tests := []struct {
		name      string
		count     int
		size      int
		wantTaken bool
	}{
		{"1000 puts of 100 KiB", 1000, 100 << 10, true},
		{"1100 puts of 1 MiB", 1100, 1 << 20, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rn := singleLeader(t)
			// Something uncommitted already: raft lets any batch through onto an empty uncommitted tail.
			if err := rn.Propose([]byte("first")); err != nil {
				t.Fatal(err)
			}
			value := make([]byte, tc.size) // shared: raft counts each entry's payload
			ents := make([]*raftpb.Entry, tc.count)
			for i := range ents {
				ents[i] = &raftpb.Entry{Data: value}
			}
			err := rn.Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(uint64(1)), Entries: ents})
			if taken := err == nil; taken != tc.wantTaken {
				t.Fatalf("%d proposals of %d bytes: err = %v, want taken %v", tc.count, tc.size, err, tc.wantTaken)
			}
			if err != nil && !errors.Is(err, raft.ErrProposalDropped) {
				t.Fatalf("refused with %v, want raft.ErrProposalDropped", err)
			}
		})
	}
}

// singleLeader returns the RawNode of a one-member cluster, configured by raftConfig, that has become leader.
func singleLeader(t *testing.T) *raft.RawNode {
	t.Helper()
	storage := raft.NewMemoryStorage()
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		Index: new(uint64(1)), Term: new(uint64(1)), ConfState: &raftpb.ConfState{Voters: []uint64{1}},
	}}
	if err := storage.ApplySnapshot(snap); err != nil {
		t.Fatal(err)
	}
	n := &Node{memberID: 1, cfg: DefaultConfig(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rn, err := raft.NewRawNode(n.raftConfig(storage, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	// Persist and advance until the campaign (pre-vote, vote, the leader's empty entry) is through.
	for range 10 {
		if !rn.HasReady() {
			break
		}
		rd := rn.Ready()
		if rd.HardState != nil {
			if err := storage.SetHardState(rd.HardState); err != nil {
				t.Fatal(err)
			}
		}
		if err := storage.Append(rd.Entries); err != nil {
			t.Fatal(err)
		}
		for _, m := range rd.Messages {
			if m.GetTo() == 1 {
				_ = rn.Step(m)
			}
		}
		rn.Advance(rd)
	}
	if st := rn.BasicStatus(); st.RaftState != raft.StateLeader {
		t.Fatalf("single member is %v after campaigning, want leader", st.RaftState)
	}
	return rn
}
