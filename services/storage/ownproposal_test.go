package storage

import (
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
)

// TestPeekEntryReadsIDAndProposer checks peekEntry against encoded entries of several shapes, and that it
// reads nothing from bytes that are not an entry.
func TestPeekEntryReadsIDAndProposer(t *testing.T) {
	for _, tc := range []struct {
		name         string
		entry        *storagepb.Entry
		id, proposer uint64
	}{
		{"put", &storagepb.Entry{Request: &pb.InternalRaftRequest{ID: 7, Header: &pb.RequestHeader{ID: 7, Username: "u"},
			Put: &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}}, ProposerMember: 3, Trace: map[string]string{"traceparent": "x"}}, 7, 3},
		{"keeper claim", &storagepb.Entry{Request: &pb.InternalRaftRequest{ID: 1 << 62}, KeeperEpoch: 4,
			KeeperClaim: &storagepb.KeeperClaim{KeeperId: "k"}, ProposerMember: 1 << 40}, 1 << 62, 1 << 40},
		{"no proposer", &storagepb.Entry{Request: &pb.InternalRaftRequest{ID: 9}}, 9, 0},
		{"no request", &storagepb.Entry{ProposerMember: 2}, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := proto.Marshal(tc.entry)
			if err != nil {
				t.Fatal(err)
			}
			if id, proposer := peekEntry(data); id != tc.id || proposer != tc.proposer {
				t.Fatalf("peekEntry = %d, %d; want %d, %d", id, proposer, tc.id, tc.proposer)
			}
		})
	}
	if id, proposer := peekEntry([]byte{0xff, 0xff}); id != 0 || proposer != 0 {
		t.Fatalf("peekEntry of garbage = %d, %d; want 0, 0", id, proposer)
	}
}

// TestOwnProposalOnlyForTheSameBytes checks that the apply takes the entry this storage proposed only for the
// very bytes it proposed, from itself, while the write still waits.
func TestOwnProposalOnlyForTheSameBytes(t *testing.T) {
	const me = 5
	s := &Storage{cfg: Config{MemberID: me}, waiters: newWaiters()}
	entry := &storagepb.Entry{Request: &pb.InternalRaftRequest{ID: 11, Put: &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}},
		ProposerMember: me}
	encoded, err := proto.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	s.waiters.registerFunc(waiter{entry: entry, encoded: encoded, done: func(applied) {}}, time.Time{})
	other := proto.Clone(entry).(*storagepb.Entry)
	other.Request.Put.Value = []byte("w")
	otherBytes, _ := proto.Marshal(other)
	fromPeer := proto.Clone(entry).(*storagepb.Entry)
	fromPeer.ProposerMember = me + 1
	peerBytes, _ := proto.Marshal(fromPeer)
	for _, tc := range []struct {
		name string
		data []byte
		want bool
	}{
		{"the proposed bytes", encoded, true},
		{"same ID, other bytes", otherBytes, false},
		{"proposed by a peer", peerBytes, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := s.ownProposal(tc.data)
			if ok != tc.want || (ok && got != entry) {
				t.Fatalf("ownProposal = %p, %v; want the proposed entry: %v", got, ok, tc.want)
			}
		})
	}
	s.waiters.take(11)
	if _, ok := s.ownProposal(encoded); ok {
		t.Fatal("ownProposal found a write no longer waiting")
	}
}
