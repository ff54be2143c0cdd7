package frontend

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// requestOp is the cairn.op of a client request's trace (the span contract in internal/obs): what kind of
// request the root span stands for, so traces can be compared by operation.
func requestOp(_ string, req any) string {
	switch r := req.(type) {
	case *pb.PutRequest:
		return "put"
	case *pb.DeleteRangeRequest:
		return "delete"
	case *pb.TxnRequest:
		return "txn"
	case *pb.RangeRequest:
		if r.Serializable {
			return "range.serializable"
		}
		return "range.linearizable"
	case *pb.LeaseGrantRequest:
		return "lease.grant"
	case *pb.LeaseRevokeRequest:
		return "lease.revoke"
	}
	return "other"
}
