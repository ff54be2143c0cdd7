package etcdcheck

import (
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func putOp(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k)}}}
}

func delOp(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
}

func txnOp(success ...*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: success}}}
}

// The cases below match what etcd v3.7.3 answers (see services/storage/mvcc/testdata/etcd-golden.json).
func TestWrite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  *pb.InternalRaftRequest
		want error
	}{
		{"put ok", &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a")}}, nil},
		{"put empty key", &pb.InternalRaftRequest{Put: &pb.PutRequest{}}, rpctypes.ErrGRPCEmptyKey},
		{"ignore value with value", &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("v"), IgnoreValue: true}}, rpctypes.ErrGRPCValueProvided},
		{"ignore lease with lease", &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a"), Lease: 1, IgnoreLease: true}}, rpctypes.ErrGRPCLeaseProvided},
		{"delete empty key", &pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{}}, rpctypes.ErrGRPCEmptyKey},
		{"range bad sort", &pb.InternalRaftRequest{Range: &pb.RangeRequest{Key: []byte("a"), SortOrder: 5}}, rpctypes.ErrGRPCInvalidSortOption},
		{"too large", &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte(strings.Repeat("x", DefaultMaxRequestBytes))}}, rpctypes.ErrGRPCRequestTooLarge},
		{"txn dup puts", &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{putOp("a"), putOp("a")}}}, rpctypes.ErrGRPCDuplicateKey},
		{"txn put in deleted range", &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{delOp("a", "c"), putOp("b")}}}, rpctypes.ErrGRPCDuplicateKey},
		{"txn from-key delete is no interval (etcd)", &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{delOp("a", "\x00"), putOp("b")}}}, nil},
		{"txn nested branches exclusive", &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{putOp("a")}, Failure: []*pb.RequestOp{putOp("a")}}}}}}}, nil},
		{"txn nested put vs outer put", &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{txnOp(putOp("a")), putOp("a")}}}, rpctypes.ErrGRPCDuplicateKey},
		{"txn empty op", &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{{}}}}, rpctypes.ErrGRPCKeyNotFound},
		{"txn too many ops", &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Failure: make([]*pb.RequestOp, 129)}}, rpctypes.ErrGRPCTooManyOps},
		{"compaction", &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: 3}}, nil},
		{"nothing", &pb.InternalRaftRequest{}, rpctypes.ErrGRPCNotCapable},
	}
	for _, tc := range tests {
		if err := Write(tc.req, DefaultLimits()); err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
