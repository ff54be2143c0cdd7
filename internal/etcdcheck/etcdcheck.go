package etcdcheck

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/pkg/v3/adt"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/authstate"
)

// Defaults of etcd's limits.
const (
	// DefaultMaxTxnOps is etcd's --max-txn-ops.
	DefaultMaxTxnOps = 128
	// DefaultMaxRequestBytes is etcd's --max-request-bytes (1.5 MiB).
	DefaultMaxRequestBytes = 1536 * 1024
)

// Limits are the configurable bounds of a request.
type Limits struct {
	MaxTxnOps       int
	MaxRequestBytes int
}

// DefaultLimits are etcd's defaults.
func DefaultLimits() Limits {
	return Limits{MaxTxnOps: DefaultMaxTxnOps, MaxRequestBytes: DefaultMaxRequestBytes}
}

// Range checks a RangeRequest.
func Range(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

// Put checks a PutRequest.
func Put(r *pb.PutRequest) error {
	switch {
	case len(r.Key) == 0:
		return rpctypes.ErrGRPCEmptyKey
	case r.IgnoreValue && len(r.Value) != 0:
		return rpctypes.ErrGRPCValueProvided
	case r.IgnoreLease && r.Lease != 0:
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

// DeleteRange checks a DeleteRangeRequest.
func DeleteRange(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

// Txn checks a TxnRequest: op counts against maxTxnOps (each of compares, success and failure on its own, nested
// txns sharing what is left), every op, then put/delete overlaps.
func Txn(r *pb.TxnRequest, maxTxnOps int) error {
	if err := checkTxn(r, maxTxnOps); err != nil {
		return err
	}
	if _, _, err := checkIntervals(r.Success); err != nil {
		return err
	}
	_, _, err := checkIntervals(r.Failure)
	return err
}

func checkTxn(r *pb.TxnRequest, maxTxnOps int) error {
	opc := max(len(r.Compare), len(r.Success), len(r.Failure))
	if opc > maxTxnOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if err := checkRequestOp(op, maxTxnOps-opc); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkRequestOp(op *pb.RequestOp, maxTxnOps int) error {
	switch t := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		return Range(t.RequestRange)
	case *pb.RequestOp_RequestPut:
		return Put(t.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		return DeleteRange(t.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		return checkTxn(t.RequestTxn, maxTxnOps)
	default:
		// An empty op: etcd answers "key not found".
		return rpctypes.ErrGRPCKeyNotFound
	}
}

// checkIntervals is etcd's duplicate-key rule: within one branch no key may be put twice or be both put and
// deleted, counting nested txns (whose then/else branches may put the same key, being exclusive).
func checkIntervals(reqs []*pb.RequestOp) (map[string]struct{}, adt.IntervalTree, error) {
	dels := adt.NewIntervalTree()
	for _, req := range reqs {
		dr := req.GetRequestDeleteRange()
		if dr == nil {
			continue
		}
		var iv adt.Interval
		if len(dr.RangeEnd) != 0 {
			iv = adt.NewStringAffineInterval(string(dr.Key), string(dr.RangeEnd))
		} else {
			iv = adt.NewStringAffinePoint(string(dr.Key))
		}
		dels.Insert(iv, struct{}{})
	}
	puts := make(map[string]struct{})
	for _, req := range reqs {
		t := req.GetRequestTxn()
		if t == nil {
			continue
		}
		putsThen, delsThen, err := checkIntervals(t.Success)
		if err != nil {
			return nil, dels, err
		}
		putsElse, delsElse, err := checkIntervals(t.Failure)
		if err != nil {
			return nil, dels, err
		}
		for k := range putsThen {
			if _, ok := puts[k]; ok || dels.Intersects(adt.NewStringAffinePoint(k)) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		for k := range putsElse {
			if _, ok := puts[k]; ok {
				if _, isSafe := putsThen[k]; !isSafe {
					return nil, dels, rpctypes.ErrGRPCDuplicateKey
				}
			}
			if dels.Intersects(adt.NewStringAffinePoint(k)) {
				return nil, dels, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		dels.Union(delsThen, adt.NewStringAffineInterval("\x00", ""))
		dels.Union(delsElse, adt.NewStringAffineInterval("\x00", ""))
	}
	for _, req := range reqs {
		p := req.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.Key)
		if _, ok := puts[k]; ok || dels.Intersects(adt.NewStringAffinePoint(k)) {
			return nil, dels, rpctypes.ErrGRPCDuplicateKey
		}
		puts[k] = struct{}{}
	}
	return puts, dels, nil
}

// RequestSize checks the encoded size of a request against MaxRequestBytes, as etcd does before proposing.
func RequestSize(size int, lim Limits) error {
	if size > lim.MaxRequestBytes {
		return rpctypes.ErrGRPCRequestTooLarge
	}
	return nil
}

// Write checks a write request as storage receives it (exactly one of its requests set), including its size as
// etcd measures it: the encoded InternalRaftRequest.
func Write(req *pb.InternalRaftRequest, lim Limits) error {
	var err error
	switch {
	case req.Put != nil:
		err = Put(req.Put)
	case req.DeleteRange != nil:
		err = DeleteRange(req.DeleteRange)
	case req.Txn != nil:
		err = Txn(req.Txn, lim.MaxTxnOps)
	case req.Range != nil:
		err = Range(req.Range)
	case req.Compaction != nil, req.LeaseGrant != nil, req.LeaseRevoke != nil, req.LeaseCheckpoint != nil,
		req.Alarm != nil, authstate.IsAuthRequest(req):
	default:
		return rpctypes.ErrGRPCNotCapable
	}
	if err != nil {
		return err
	}
	return RequestSize(proto.Size(req), lim)
}
