package watchhub

import (
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// semStep is one step of a semantics case: a write, or a request on one of the case's watch streams.
type semStep struct {
	write  *pb.InternalRaftRequest
	stream int
	watch  *pb.WatchRequest
}

type semCase struct {
	name  string
	steps []semStep
}

func put(key, value string) semStep {
	return semStep{write: &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(key), Value: []byte(value)}}}
}

func del(key, end string) semStep {
	r := &pb.DeleteRangeRequest{Key: []byte(key)}
	if end != "" {
		r.RangeEnd = []byte(end)
	}
	return semStep{write: &pb.InternalRaftRequest{DeleteRange: r}}
}

func txn(ops ...*pb.RequestOp) semStep {
	return semStep{write: &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: ops}}}
}

func opPut(key, value string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(value)}}}
}

func opDel(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}}
}

func compact(rev int64) semStep {
	return semStep{write: &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: rev}}}
}

func watchOn(stream int, c *pb.WatchCreateRequest) semStep {
	return semStep{stream: stream, watch: &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: c}}}
}

func cancelOn(stream int, id int64) semStep {
	return semStep{stream: stream, watch: &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
		CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}}
}

func progressOn(stream int) semStep {
	return semStep{stream: stream, watch: &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{
		ProgressRequest: &pb.WatchProgressRequest{}}}}
}

func key(k string) *pb.WatchCreateRequest { return &pb.WatchCreateRequest{Key: []byte(k)} }

var (
	allKeys   = []byte{0}
	bigValue  = strings.Repeat("v", 1000000)
	halfValue = strings.Repeat("h", 700000)
)

// semanticsCases are run against real etcd v3.7.3 (recorded in testdata/etcd-watch-golden.json) and against
// a hub; every response must match, headers' cluster, member and term aside.
var semanticsCases = []semCase{
	{name: "watch ids", steps: []semStep{
		put("a", "1"),
		watchOn(0, key("a")),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("a"), WatchId: 7}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("b"), WatchId: 7}),
		watchOn(0, key("a")),
		cancelOn(0, 99),
		cancelOn(0, 7),
		cancelOn(0, 7),
		put("a", "2"),
		watchOn(0, key("b")),
		watchOn(0, key("b")),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("c"), WatchId: -5}),
	}},
	{name: "refused creates", steps: []semStep{
		put("a", "1"),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("a")}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("b")}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: -1}),
		watchOn(0, key("a")),
		put("a", "2"),
	}},
	{name: "ranges", steps: []semStep{
		watchOn(0, key("a")),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("b")}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("ab"), RangeEnd: []byte("ac")}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: allKeys}),
		watchOn(0, &pb.WatchCreateRequest{Key: allKeys, RangeEnd: allKeys}),
		watchOn(0, &pb.WatchCreateRequest{}),
		watchOn(1, &pb.WatchCreateRequest{RangeEnd: allKeys}),
		put("a", "1"), put("ab", "1"), put("abc", "1"), put("b", "1"), put("c", "1"), put("\x00", "z"),
		del("a", "c"),
	}},
	{name: "start revisions", steps: []semStep{
		put("a", "1"), put("b", "1"), put("a", "2"), put("c", "1"),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 2}),
		watchOn(0, &pb.WatchCreateRequest{Key: allKeys, RangeEnd: allKeys, StartRevision: 1, PrevKv: true}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 4}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 5}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 8}),
		put("a", "3"), put("b", "2"), put("a", "4"), put("a", "5"),
	}},
	{name: "filters and prev kv", steps: []semStep{
		put("k", "0"),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("k"), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("k"), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("k"), Filters: []pb.WatchCreateRequest_FilterType{
			pb.WatchCreateRequest_NOPUT, pb.WatchCreateRequest_NODELETE}}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("k"), PrevKv: true}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("k"), PrevKv: true, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}}),
		put("k", "1"), del("k", ""), put("k", "2"), put("k", "3"),
		watchOn(1, &pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 1, PrevKv: true, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}}),
	}},
	{name: "transactions", steps: []semStep{
		put("x", "0"), put("y", "0"),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("x"), RangeEnd: []byte("z"), PrevKv: true}),
		watchOn(0, key("y")),
		txn(opPut("x", "1"), opDel("y"), opPut("x2", "1")),
		txn(opPut("y", "1"), opPut("y2", "2")),
		del("x", "y"),
	}},
	{name: "cancel stops events", steps: []semStep{
		watchOn(0, key("a")),
		watchOn(0, key("a")),
		put("a", "1"),
		cancelOn(0, 0),
		put("a", "2"),
		cancelOn(0, 1),
		put("a", "3"),
	}},
	{name: "compaction", steps: []semStep{
		put("a", "1"), put("b", "1"), put("a", "2"), put("a", "3"), put("b", "2"),
		watchOn(0, key("b")),
		compact(4),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 2}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 4}),
		watchOn(0, &pb.WatchCreateRequest{Key: allKeys, RangeEnd: allKeys, StartRevision: 4, PrevKv: true}),
		put("b", "3"),
		cancelOn(0, 1),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 3}),
	}},
	{name: "progress requests", steps: []semStep{
		progressOn(0),
		put("a", "1"),
		watchOn(0, key("a")),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("c")}),
		progressOn(0),
		put("a", "2"),
		progressOn(0),
		watchOn(1, &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 10}),
		progressOn(1),
		watchOn(1, key("a")),
		cancelOn(1, 0),
		progressOn(1),
	}},
	{name: "fragments", steps: []semStep{
		put("big", bigValue), put("big", bigValue), put("big", bigValue),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("big"), StartRevision: 2, Fragment: true}),
		watchOn(0, &pb.WatchCreateRequest{Key: []byte("big"), StartRevision: 2}),
		put("h1", halfValue), put("h2", halfValue),
		watchOn(1, &pb.WatchCreateRequest{Key: []byte("h"), RangeEnd: []byte("i"), PrevKv: true, Fragment: true}),
		watchOn(1, &pb.WatchCreateRequest{Key: []byte("h"), RangeEnd: []byte("i"), PrevKv: true}),
		txn(opPut("h1", halfValue), opPut("h2", halfValue)),
	}},
}
