package mvcc

import (
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/authstate"
	"github.com/cairn-kv/cairn/internal/keeperclaim"
)

// Result is what applying one entry produced.
type Result struct {
	// Response is etcd's response (*etcdserverpb.PutResponse, ...); nil when Err is set.
	Response proto.Message
	// Err is etcd's gRPC error (rpctypes) for a request that was refused; a refused request changed nothing.
	Err error
	// Revision is the store revision after the entry.
	Revision int64
	// Events are the key changes of the entry, in order, all at Revision; PrevKv is set when the key existed.
	Events []*mvccpb.Event
	// Leases are the lease changes of the entry, in order.
	Leases []LeaseChange
	// Alarms is set when the entry activated or deactivated an alarm: the alarms now active.
	Alarms []*pb.AlarmMember
	// Compacted is closed, for a Compaction, once its physical removal from bbolt has finished.
	Compacted <-chan struct{}
	// Index is the log index of the entry.
	Index uint64
	// Keeper is set when the entry changed the leasekeeper claim: the state now stored.
	Keeper *storagepb.KeeperState
	// AuthRevision is set for an applied auth request: the auth store's revision after it.
	AuthRevision uint64
}

// LeaseChangeType says what happened to a lease.
type LeaseChangeType int

const (
	// LeaseGranted is a new lease with TTL.
	LeaseGranted LeaseChangeType = iota + 1
	// LeaseRevoked is a lease removed with its keys.
	LeaseRevoked
	// LeaseCheckpointed is a lease whose remaining TTL was recorded.
	LeaseCheckpointed
)

// LeaseChange is one change to one lease.
type LeaseChange struct {
	Type         LeaseChangeType
	ID           int64
	TTL          int64 // granted TTL (LeaseGranted)
	RemainingTTL int64 // LeaseCheckpointed
}

// Apply applies the committed entry at index. An index at or below the applied index is skipped (nil result), so
// replaying the log after a crash is exact. The error is an internal failure (the store then needs reopening);
// etcd's refusals are in Result.Err.
func (s *Store) Apply(index, term uint64, req *pb.InternalRaftRequest) (*Result, error) {
	return s.ApplyFenced(index, term, req, 0)
}

// ApplyFenced is Apply of a request fenced by a leasekeeper epoch (see keeperclaim.Fence): when keeperEpoch is
// not 0 and not the stored epoch, the request is refused (Result.Err) and changes nothing.
func (s *Store) ApplyFenced(index, term uint64, req *pb.InternalRaftRequest, keeperEpoch uint64) (*Result, error) {
	return s.applyEntry(index, term, func() (*Result, error) {
		if err := keeperclaim.Fence(s.keeper, keeperEpoch); err != nil {
			return &Result{Err: err}, nil
		}
		return s.applyRequest(index, req)
	})
}

// ApplyKeeperClaim applies a leasekeeper claim entry (keeperclaim.Apply); a refused claim is in Result.Err.
func (s *Store) ApplyKeeperClaim(index, term uint64, claim *storagepb.KeeperClaim) (*Result, error) {
	return s.applyEntry(index, term, func() (*Result, error) {
		next, refused := keeperclaim.Apply(s.keeper, claim, index)
		if refused != nil {
			return &Result{Err: refused}, nil
		}
		data, err := proto.Marshal(next)
		if err != nil {
			return nil, fmt.Errorf("marshal keeper state: %w", err)
		}
		if err := s.wtx.Bucket(bucketMeta).Put(metaKeeperState, data); err != nil {
			return nil, fmt.Errorf("write keeper state: %w", err)
		}
		s.keeper = next
		return &Result{Response: proto.Clone(next), Keeper: proto.Clone(next).(*storagepb.KeeperState)}, nil
	})
}

// applyEntry runs apply for the entry at index under the store's locks, skipping replays, and advances the
// applied index.
func (s *Store) applyEntry(index, term uint64, apply func() (*Result, error)) (*Result, error) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if index <= s.appliedIndex {
		s.mu.Unlock()
		return nil, nil
	}
	res, err := apply()
	if err == nil {
		s.appliedIndex, s.appliedTerm = index, term
		res.Revision, res.Index = s.currentRev, index
	}
	s.mu.Unlock()
	if err != nil {
		return nil, s.fail(fmt.Errorf("apply index %d: %w", index, err))
	}
	return res, s.afterApplyLocked()
}

// ApplyNoop advances the applied index past an entry with nothing for storage (an empty leader entry, a
// membership change).
func (s *Store) ApplyNoop(index, term uint64) error {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	s.mu.Lock()
	if index <= s.appliedIndex {
		s.mu.Unlock()
		return nil
	}
	s.appliedIndex, s.appliedTerm = index, term
	s.mu.Unlock()
	return s.afterApplyLocked()
}

func (s *Store) afterApplyLocked() error {
	s.markDirtyLocked()
	s.pendingEntries++
	if s.pendingEntries >= s.cfg.BatchLimit {
		return s.commitLocked()
	}
	return nil
}

// applyRequest dispatches one request. It runs with batchMu and mu held.
func (s *Store) applyRequest(index uint64, req *pb.InternalRaftRequest) (*Result, error) {
	res := &Result{}
	if err := s.authRefusal(req); err != nil {
		res.Err = err
		return res, nil
	}
	if authstate.IsAuthRequest(req) {
		return s.applyAuth(req)
	}
	if err := s.alarmRefusal(req); err != nil {
		res.Err = err
		return res, nil
	}
	w := s.newWriteTxn()
	w.index = index
	var err error
	switch {
	case req.Put != nil:
		res.Response, res.Err, err = w.applyPut(req.Put)
	case req.DeleteRange != nil:
		res.Response, err = w.applyDeleteRange(req.DeleteRange)
	case req.Txn != nil:
		res.Response, res.Err, err = w.applyTxn(req.Txn)
	case req.Compaction != nil:
		res.Response, res.Compacted, res.Err, err = s.applyCompaction(req.Compaction)
	case req.LeaseGrant != nil:
		res.Response, res.Err, err = w.applyLeaseGrant(req.LeaseGrant)
	case req.LeaseRevoke != nil:
		res.Response, res.Err, err = w.applyLeaseRevoke(req.LeaseRevoke)
	case req.LeaseCheckpoint != nil:
		res.Response, err = w.applyLeaseCheckpoint(req.LeaseCheckpoint)
	case req.Alarm != nil:
		var resp *pb.AlarmResponse
		resp, err = s.applyAlarm(req.Alarm)
		res.Response = resp
		if req.Alarm.Action != pb.AlarmRequest_GET {
			res.Alarms = s.alarmsLocked(pb.AlarmType_NONE)
		}
	default:
		res.Err = rpctypes.ErrGRPCNotCapable
	}
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		res.Response = nil
		return res, nil
	}
	w.end()
	res.Events, res.Leases = w.events, w.leaseChanges
	return res, nil
}

// alarmRefusal is etcd's capped (NOSPACE) and corrupt appliers: with a NOSPACE alarm active, requests that add
// data are refused; with a CORRUPT alarm, every KV and lease write is.
func (s *Store) alarmRefusal(req *pb.InternalRaftRequest) error {
	if s.alarmActiveLocked(pb.AlarmType_CORRUPT) {
		if req.Put != nil || req.Range != nil || req.DeleteRange != nil || req.Txn != nil ||
			req.Compaction != nil || req.LeaseGrant != nil || req.LeaseRevoke != nil {
			return rpctypes.ErrGRPCCorrupt
		}
	}
	if s.alarmActiveLocked(pb.AlarmType_NOSPACE) {
		if req.Put != nil || req.LeaseGrant != nil || (req.Txn != nil && TxnCost(req.Txn) > 0) {
			return rpctypes.ErrGRPCNoSpace
		}
	}
	return nil
}

// kvOverhead and leaseOverhead are etcd's quota cost estimates for a key's metadata and a lease.
const (
	kvOverhead    = 256
	leaseOverhead = 64
)

// RequestCost is etcd's quota charge of a request: 0 for requests that add no data.
func RequestCost(req *pb.InternalRaftRequest) int {
	switch {
	case req.Put != nil:
		return putCost(req.Put)
	case req.Txn != nil:
		return TxnCost(req.Txn)
	case req.LeaseGrant != nil:
		return leaseOverhead
	}
	return 0
}

func putCost(r *pb.PutRequest) int { return kvOverhead + len(r.Key) + len(r.Value) }

// TxnCost is the larger of the costs of a txn's two branches, counting puts in nested txns.
func TxnCost(r *pb.TxnRequest) int {
	branch := func(ops []*pb.RequestOp) int {
		n := 0
		for _, op := range ops {
			if p := op.GetRequestPut(); p != nil {
				n += putCost(p)
			} else if t := op.GetRequestTxn(); t != nil {
				n += TxnCost(t)
			}
		}
		return n
	}
	return max(branch(r.Success), branch(r.Failure))
}
