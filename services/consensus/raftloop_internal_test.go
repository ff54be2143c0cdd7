package consensus

import (
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

func TestDeliverableBeforePersist(t *testing.T) {
	normal := func(i uint64) *raftpb.Entry { return &raftpb.Entry{Index: new(i), Type: raftpb.EntryNormal.Enum()} }
	conf := func(i uint64) *raftpb.Entry { return &raftpb.Entry{Index: new(i), Type: raftpb.EntryConfChange.Enum()} }
	snapshot := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(9)), Term: new(uint64(2))}}
	tests := []struct {
		name string
		rd   raft.Ready
		want bool
	}{
		{"nothing committed", raft.Ready{Entries: []*raftpb.Entry{normal(11)}}, false},
		{"committed and fsynced earlier", raft.Ready{CommittedEntries: []*raftpb.Entry{normal(9), normal(10)}, Entries: []*raftpb.Entry{normal(11)}}, true},
		{"committed by followers, not yet fsynced here", raft.Ready{CommittedEntries: []*raftpb.Entry{normal(10), normal(11)}, Entries: []*raftpb.Entry{normal(11)}}, false},
		{"a conf change waits", raft.Ready{CommittedEntries: []*raftpb.Entry{normal(9), conf(10)}}, false},
		{"a snapshot waits", raft.Ready{CommittedEntries: []*raftpb.Entry{normal(10)}, Snapshot: snapshot}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &raftLoop{persisted: 10}
			if got := l.deliverableBeforePersist(tt.rd); got != tt.want {
				t.Fatalf("deliverableBeforePersist = %v, want %v", got, tt.want)
			}
		})
	}
}
