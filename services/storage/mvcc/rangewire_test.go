package mvcc

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// checkRangeEncoded: RangeEncoded(r) decodes to Range(r)'s answer (want, wantErr), its header carrying the term.
func checkRangeEncoded(t *testing.T, ts *testStore, r *pb.RangeRequest, want *pb.RangeResponse, wantErr error) {
	t.Helper()
	const term = 7
	var allocated int
	encoded, err := ts.RangeEncoded(r, term, func(n int) []byte {
		allocated = n
		return append(make([]byte, 0, 2+n), "hd"...) // after a head of the caller's
	})
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("RangeEncoded %v: error %v, Range's %v", r, err, wantErr)
	}
	if err != nil {
		return
	}
	if string(encoded[:2]) != "hd" || len(encoded) != 2+allocated {
		t.Fatalf("RangeEncoded %v: %d bytes after the head %q, allocated %d", r, len(encoded)-2, encoded[:2], allocated)
	}
	got := &pb.RangeResponse{}
	if err := proto.Unmarshal(encoded[2:], got); err != nil {
		t.Fatalf("RangeEncoded %v: %v", r, err)
	}
	want = proto.Clone(want).(*pb.RangeResponse)
	want.Header.RaftTerm = term
	if !proto.Equal(got, want) {
		t.Fatalf("RangeEncoded %v:\n got %v\nwant %v", r, got, want)
	}
}

// TestRangeEncodedAsRange: the encoded range is Range's answer for every kind of range, over committed and
// pending (not yet committed) revisions, and refuses what Range refuses.
func TestRangeEncodedAsRange(t *testing.T) {
	t.Parallel()
	ts := openTestStore(t, Config{})
	for i := range 20 {
		ts.apply(put(fmt.Sprintf("k%02d", i), fmt.Sprintf("committed-%d", i)))
	}
	if err := ts.Commit(); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 30; i++ { // pending: k10..k19 again, k20..k29 new
		ts.apply(put(fmt.Sprintf("k%02d", i), fmt.Sprintf("pending-%d", i), withLease(0)))
	}
	ts.apply(&pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("k05")}})
	tests := []*pb.RangeRequest{
		{Key: []byte("k03")},
		{Key: []byte("k15")},
		{Key: []byte("nothing")},
		{Key: []byte("k"), RangeEnd: []byte("l")},
		{Key: []byte{0}, RangeEnd: []byte{0}},
		{Key: []byte("k"), RangeEnd: []byte("l"), Limit: 7},
		{Key: []byte("k"), RangeEnd: []byte("l"), Limit: 29},
		{Key: []byte("k"), RangeEnd: []byte("l"), Limit: 500},
		{Key: []byte("k"), RangeEnd: []byte("l"), Revision: 15},
		{Key: []byte("k"), RangeEnd: []byte("l"), Revision: 1},
		{Key: []byte("k"), RangeEnd: []byte("l"), SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_KEY},
		{Key: []byte("k"), RangeEnd: []byte("l"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_VALUE, Limit: 3},
		{Key: []byte("k"), RangeEnd: []byte("l"), KeysOnly: true},
		{Key: []byte("k"), RangeEnd: []byte("l"), CountOnly: true},
		{Key: []byte("k"), RangeEnd: []byte("l"), MinModRevision: 25},
		{Key: []byte("k"), RangeEnd: []byte("l"), Revision: 1000},
	}
	for _, r := range tests {
		want, wantErr := ts.Range(r)
		checkRangeEncoded(t, ts, r, want, wantErr)
	}
	if _, err := ts.do(&pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: 10}}); err != nil {
		t.Fatal(err)
	}
	compacted := &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), Revision: 5}
	want, wantErr := ts.Range(compacted)
	if wantErr == nil {
		t.Fatalf("range at a compacted revision answered %v", want)
	}
	checkRangeEncoded(t, ts, compacted, want, wantErr)
}
