package mvcc

import (
	"bytes"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// IsTxnReadOnly reports whether a txn has only ranges in both branches (nested txns count as writes, as in etcd).
func IsTxnReadOnly(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

// IsTxnSerializable reports whether every op of a txn is a serializable range.
func IsTxnSerializable(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if rr := op.GetRequestRange(); rr == nil || !rr.Serializable {
				return false
			}
		}
	}
	return true
}

func (w *writeTxn) applyTxn(r *pb.TxnRequest) (*pb.TxnResponse, error, error) {
	path, err := w.compareToPath(r)
	if err != nil {
		return nil, nil, err
	}
	if err := w.checkTxn(r, path); err != nil {
		return nil, err, nil
	}
	resp, _ := newTxnResp(r, path)
	if _, err := w.executeTxn(r, path, resp); err != nil {
		return nil, nil, err
	}
	resp.Header.Revision = w.readRev()
	return resp, nil, nil
}

// compareToPath evaluates the compares of the txn and of every nested txn on the chosen branches, all against
// the state before the txn, and returns the branch taken by each (depth first), as etcd does. It fails only when
// a sealed value cannot be opened (see Config.Opener).
func (w *writeTxn) compareToPath(r *pb.TxnRequest) ([]bool, error) {
	ok, err := w.applyCompares(r.Compare)
	if err != nil {
		return nil, err
	}
	path := []bool{ok}
	ops := r.Success
	if !path[0] {
		ops = r.Failure
	}
	for _, op := range ops {
		if t := op.GetRequestTxn(); t != nil {
			sub, err := w.compareToPath(t)
			if err != nil {
				return nil, err
			}
			path = append(path, sub...)
		}
	}
	return path, nil
}

func (w *writeTxn) applyCompares(cmps []*pb.Compare) (bool, error) {
	for _, c := range cmps {
		if ok, err := w.applyCompare(c); !ok || err != nil {
			return false, err
		}
	}
	return true, nil
}

// applyCompare is true when every existing key of the compare's range satisfies it; on no key, a VALUE compare
// fails and the others compare against a zero KeyValue. A VALUE compare of a store with sealed values compares
// plain values: the stored ones and the compare's (sealed by the proposer for its key) are opened.
func (w *writeTxn) applyCompare(c *pb.Compare) (bool, error) {
	if c.Target == pb.Compare_VALUE && w.s.cfg.Opener != nil {
		plain, err := w.s.cfg.Opener.AppendOpen(nil, c.Key, c.GetValue())
		if err != nil {
			return false, fmt.Errorf("compare value of key %q: %w", c.Key, err)
		}
		c = &pb.Compare{Result: c.Result, Target: c.Target, Key: c.Key, RangeEnd: c.RangeEnd,
			TargetUnion: &pb.Compare_Value{Value: plain}}
	}
	var kvs []*mvccpb.KeyValue
	readRev := w.readRev()
	failed := false
	var openErr error
	w.s.index.visit(keyRange{key: c.Key, end: c.RangeEnd}, func(h *keyHistory) bool {
		ver, ok := h.at(readRev)
		if !ok {
			return true
		}
		kv := &mvccpb.KeyValue{Key: h.key, CreateRevision: ver.created, ModRevision: ver.rev.main,
			Version: ver.version, Lease: ver.lease}
		if c.Target == pb.Compare_VALUE {
			full, err := w.values.load(ver.rev)
			if err != nil {
				failed = true
				return false
			}
			if openErr = w.s.openKV(full); openErr != nil {
				return false
			}
			kv = full
		}
		kvs = append(kvs, kv)
		return true
	})
	if openErr != nil {
		return false, openErr
	}
	if failed {
		return false, nil
	}
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false, nil
		}
		return compareKV(c, &mvccpb.KeyValue{}), nil
	}
	for _, kv := range kvs {
		if !compareKV(c, kv) {
			return false, nil
		}
	}
	return true, nil
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var result int
	switch c.Target {
	case pb.Compare_VALUE:
		result = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		result = compareInt64(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		result = compareInt64(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		result = compareInt64(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		result = compareInt64(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return result == 0
	case pb.Compare_NOT_EQUAL:
		return result != 0
	case pb.Compare_GREATER:
		return result > 0
	case pb.Compare_LESS:
		return result < 0
	}
	return true
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkTxn runs the apply-time checks of the ops on the chosen branches before anything is written, so a refused
// txn changes nothing: range revisions, put leases and ignore_* keys.
func (w *writeTxn) checkTxn(r *pb.TxnRequest, path []bool) error {
	_, err := w.checkBranch(r, path)
	return err
}

func (w *writeTxn) checkBranch(r *pb.TxnRequest, path []bool) (int, error) {
	ops := r.Success
	if !path[0] {
		ops = r.Failure
	}
	nested := 0
	for _, op := range ops {
		switch {
		case op.GetRequestRange() != nil:
			if err := w.s.checkRangeRev(op.GetRequestRange().Revision, w.readRev()); err != nil {
				return 0, err
			}
		case op.GetRequestPut() != nil:
			if err := w.checkPut(op.GetRequestPut()); err != nil {
				return 0, err
			}
		case op.GetRequestTxn() != nil:
			n, err := w.checkBranch(op.GetRequestTxn(), path[1:])
			if err != nil {
				return 0, err
			}
			nested += n + 1
			path = path[n+1:]
		}
	}
	return nested, nil
}

// newTxnResp allocates the response tree of the branches path takes.
func newTxnResp(r *pb.TxnRequest, path []bool) (*pb.TxnResponse, int) {
	ops := r.Success
	if !path[0] {
		ops = r.Failure
	}
	resp := &pb.TxnResponse{Header: &pb.ResponseHeader{}, Succeeded: path[0], Responses: make([]*pb.ResponseOp, len(ops))}
	nested := 0
	for i, op := range ops {
		switch t := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{}}
		case *pb.RequestOp_RequestPut:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{}}
		case *pb.RequestOp_RequestDeleteRange:
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{}}
		case *pb.RequestOp_RequestTxn:
			sub, n := newTxnResp(t.RequestTxn, path[1:])
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: sub}}
			path = path[1+n:]
			nested += n + 1
		default:
			resp.Responses[i] = &pb.ResponseOp{}
		}
	}
	return resp, nested
}

// executeTxn runs the ops of the chosen branches in order.
func (w *writeTxn) executeTxn(r *pb.TxnRequest, path []bool, resp *pb.TxnResponse) (int, error) {
	ops := r.Success
	if !path[0] {
		ops = r.Failure
	}
	nested := 0
	for i, op := range ops {
		slot := resp.Responses[i].Response
		switch t := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			rr, err := w.s.rangeLocked(t.RequestRange, w.readRev(), w.values)
			if err != nil {
				return 0, err
			}
			slot.(*pb.ResponseOp_ResponseRange).ResponseRange = rr
		case *pb.RequestOp_RequestPut:
			pr, err := w.doPut(t.RequestPut)
			if err != nil {
				return 0, err
			}
			slot.(*pb.ResponseOp_ResponsePut).ResponsePut = pr
		case *pb.RequestOp_RequestDeleteRange:
			dr, err := w.doDeleteRange(t.RequestDeleteRange)
			if err != nil {
				return 0, err
			}
			slot.(*pb.ResponseOp_ResponseDeleteRange).ResponseDeleteRange = dr
		case *pb.RequestOp_RequestTxn:
			sub := slot.(*pb.ResponseOp_ResponseTxn).ResponseTxn
			n, err := w.executeTxn(t.RequestTxn, path[1:], sub)
			if err != nil {
				return 0, err
			}
			nested += n + 1
			path = path[n+1:]
		}
	}
	return nested, nil
}

// checkRangeRev is etcd's revision check of a range at rev against the current revision.
func (s *Store) checkRangeRev(rev, curRev int64) error {
	switch {
	case rev == 0:
		return nil
	case rev > curRev:
		return rpctypes.ErrGRPCFutureRev
	case rev < s.compactRev:
		return rpctypes.ErrGRPCCompacted
	}
	return nil
}
