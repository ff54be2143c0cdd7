package mvcc

import (
	"log/slog"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/etcdcheck"
)

// testStore is a Store with the log index it has applied up to, for tests that apply requests directly.
type testStore struct {
	*Store
	t     testing.TB
	index uint64
}

func openTestStore(t testing.TB, cfg Config) *testStore {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = filepath.Join(t.TempDir(), "storage.db")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &testStore{Store: s, t: t, index: s.Position().AppliedIndex}
}

// apply applies req as the next log entry and returns its result.
func (ts *testStore) apply(req *pb.InternalRaftRequest) *Result {
	ts.t.Helper()
	ts.index++
	res, err := ts.Apply(ts.index, 1, req)
	if err != nil {
		ts.t.Fatalf("Apply index %d: %v", ts.index, err)
	}
	return res
}

// do runs a request the way the storage service does: etcd's API checks, then a local read, a local read-only
// txn, or an apply.
func (ts *testStore) do(req *pb.InternalRaftRequest) (proto.Message, error) {
	ts.t.Helper()
	if err := etcdcheck.Write(req, etcdcheck.DefaultLimits()); err != nil {
		return nil, err
	}
	switch {
	case req.Range != nil:
		return ts.Range(req.Range)
	case req.Txn != nil && IsTxnReadOnly(req.Txn):
		return ts.ReadTxn(req.Txn)
	}
	res := ts.apply(req)
	if res.Err != nil {
		return nil, res.Err
	}
	return res.Response, nil
}

// Request builders, so tables read like etcdctl sessions.

func put(key, value string, opts ...func(*pb.PutRequest)) *pb.InternalRaftRequest {
	r := &pb.PutRequest{Key: []byte(key), Value: []byte(value)}
	for _, o := range opts {
		o(r)
	}
	return &pb.InternalRaftRequest{Put: r}
}

func withLease(id int64) func(*pb.PutRequest) { return func(r *pb.PutRequest) { r.Lease = id } }
func withPrevKV(r *pb.PutRequest)             { r.PrevKv = true }
func ignoreValue(r *pb.PutRequest)            { r.IgnoreValue = true }
func ignoreLease(r *pb.PutRequest)            { r.IgnoreLease = true }

func get(key, end string, opts ...func(*pb.RangeRequest)) *pb.InternalRaftRequest {
	r := &pb.RangeRequest{Key: []byte(key), RangeEnd: bytesOrNil(end)}
	for _, o := range opts {
		o(r)
	}
	return &pb.InternalRaftRequest{Range: r}
}

func bytesOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func atRev(rev int64) func(*pb.RangeRequest) { return func(r *pb.RangeRequest) { r.Revision = rev } }
func limit(n int64) func(*pb.RangeRequest)   { return func(r *pb.RangeRequest) { r.Limit = n } }
func keysOnly(r *pb.RangeRequest)            { r.KeysOnly = true }
func countOnly(r *pb.RangeRequest)           { r.CountOnly = true }
func minMod(rev int64) func(*pb.RangeRequest) {
	return func(r *pb.RangeRequest) { r.MinModRevision = rev }
}
func maxMod(rev int64) func(*pb.RangeRequest) {
	return func(r *pb.RangeRequest) { r.MaxModRevision = rev }
}
func minCreate(rev int64) func(*pb.RangeRequest) {
	return func(r *pb.RangeRequest) { r.MinCreateRevision = rev }
}
func maxCreate(rev int64) func(*pb.RangeRequest) {
	return func(r *pb.RangeRequest) { r.MaxCreateRevision = rev }
}
func sortBy(target pb.RangeRequest_SortTarget, order pb.RangeRequest_SortOrder) func(*pb.RangeRequest) {
	return func(r *pb.RangeRequest) { r.SortTarget, r.SortOrder = target, order }
}

func del(key, end string, prevKV bool) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte(key), RangeEnd: bytesOrNil(end), PrevKv: prevKV}}
}

func compact(rev int64) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: rev}}
}

func grant(id, ttl int64) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{LeaseGrant: &pb.LeaseGrantRequest{ID: id, TTL: ttl}}
}

func revoke(id int64) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: id}}
}

func txn(cmps []*pb.Compare, success, failure []*pb.RequestOp) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Compare: cmps, Success: success, Failure: failure}}
}

func ops(reqs ...*pb.InternalRaftRequest) []*pb.RequestOp {
	out := make([]*pb.RequestOp, 0, len(reqs))
	for _, r := range reqs {
		switch {
		case r == nil:
			out = append(out, &pb.RequestOp{})
		case r.Range != nil:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r.Range}})
		case r.Put != nil:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: r.Put}})
		case r.DeleteRange != nil:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r.DeleteRange}})
		case r.Txn != nil:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: r.Txn}})
		}
	}
	return out
}

func cmp(key, end string, target pb.Compare_CompareTarget, result pb.Compare_CompareResult, v any) *pb.Compare {
	c := &pb.Compare{Key: []byte(key), RangeEnd: bytesOrNil(end), Target: target, Result: result}
	switch target {
	case pb.Compare_VALUE:
		c.TargetUnion = &pb.Compare_Value{Value: []byte(v.(string))}
	case pb.Compare_VERSION:
		c.TargetUnion = &pb.Compare_Version{Version: int64(v.(int))}
	case pb.Compare_CREATE:
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: int64(v.(int))}
	case pb.Compare_MOD:
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: int64(v.(int))}
	case pb.Compare_LEASE:
		c.TargetUnion = &pb.Compare_Lease{Lease: int64(v.(int))}
	}
	return c
}

func cmps(c ...*pb.Compare) []*pb.Compare { return c }
