package mvcc

import (
	"fmt"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
)

// MaxLeaseTTL is etcd's largest grantable TTL, in seconds.
const MaxLeaseTTL = 9000000000

// leaseState is one lease's bookkeeping. The clock that expires it lives in the leasekeeper.
type leaseState struct {
	ttl             int64
	remainingTTL    int64  // last checkpoint; 0 if none (or reset by a renewal)
	checkpointIndex uint64 // log index of the checkpoint that set remainingTTL
	keys            map[string]struct{}
}

func (s *Store) attachLease(id int64, key []byte) {
	if l := s.leases[id]; l != nil {
		l.keys[string(key)] = struct{}{}
	}
}

func (s *Store) detachLease(id int64, key []byte) {
	if l := s.leases[id]; l != nil {
		delete(l.keys, string(key))
	}
}

func (s *Store) persistLease(id int64, l *leaseState) error {
	data, err := proto.Marshal(l.record(id))
	if err != nil {
		return fmt.Errorf("marshal lease %x: %w", id, err)
	}
	if err := s.wtx.Bucket(bucketLease).Put(uint64Bytes(uint64(id)), data); err != nil {
		return fmt.Errorf("write lease %x: %w", id, err)
	}
	return nil
}

func (l *leaseState) record(id int64) *storagepb.LeaseRecord {
	return &storagepb.LeaseRecord{Id: id, Ttl: l.ttl, RemainingTtl: l.remainingTTL, CheckpointIndex: l.checkpointIndex}
}

func (w *writeTxn) applyLeaseGrant(r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error, error) {
	switch {
	case r.ID == 0:
		return nil, rpctypes.ErrGRPCLeaseNotFound, nil
	case r.TTL > MaxLeaseTTL:
		return nil, rpctypes.ErrGRPCLeaseTTLTooLarge, nil
	case w.s.leases[r.ID] != nil:
		return nil, rpctypes.ErrGRPCLeaseExist, nil
	}
	l := &leaseState{ttl: max(r.TTL, w.s.cfg.MinLeaseTTL), keys: map[string]struct{}{}}
	if err := w.s.persistLease(r.ID, l); err != nil {
		return nil, nil, err
	}
	w.s.leases[r.ID] = l
	w.leaseChanges = append(w.leaseChanges, LeaseChange{Type: LeaseGranted, ID: r.ID, TTL: l.ttl})
	return &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: w.beginRev}, ID: r.ID, TTL: l.ttl}, nil, nil
}

// applyLeaseRevoke deletes the lease and every key attached to it, in key order, all in one revision.
func (w *writeTxn) applyLeaseRevoke(r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error, error) {
	l := w.s.leases[r.ID]
	if l == nil {
		return nil, rpctypes.ErrGRPCLeaseNotFound, nil
	}
	for _, key := range sortedKeys(l.keys) {
		if _, err := w.deleteRange(keyRange{key: []byte(key)}); err != nil {
			return nil, nil, err
		}
	}
	if err := w.s.wtx.Bucket(bucketLease).Delete(uint64Bytes(uint64(r.ID))); err != nil {
		return nil, nil, fmt.Errorf("delete lease %x: %w", r.ID, err)
	}
	delete(w.s.leases, r.ID)
	w.leaseChanges = append(w.leaseChanges, LeaseChange{Type: LeaseRevoked, ID: r.ID})
	return &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: w.readRev()}}, nil, nil
}

// applyLeaseCheckpoint records remaining TTLs; unknown leases are skipped, as in etcd.
func (w *writeTxn) applyLeaseCheckpoint(r *pb.LeaseCheckpointRequest) (*pb.LeaseCheckpointResponse, error) {
	for _, c := range r.Checkpoints {
		l := w.s.leases[c.ID]
		if l == nil {
			continue
		}
		l.remainingTTL, l.checkpointIndex = c.Remaining_TTL, w.index
		if err := w.s.persistLease(c.ID, l); err != nil {
			return nil, err
		}
		w.leaseChanges = append(w.leaseChanges, LeaseChange{Type: LeaseCheckpointed, ID: c.ID, RemainingTTL: c.Remaining_TTL})
	}
	return &pb.LeaseCheckpointResponse{Header: &pb.ResponseHeader{Revision: w.beginRev}}, nil
}

// LeaseTimeToLive reports a lease as storage knows it: TTL is the last checkpointed remaining TTL, or the granted
// TTL if never checkpointed; -1 when the lease does not exist (etcd answers so, without an error).
func (s *Store) LeaseTimeToLive(r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return nil, err
	}
	resp := &pb.LeaseTimeToLiveResponse{Header: &pb.ResponseHeader{Revision: s.currentRev}, ID: r.ID, TTL: -1}
	l := s.leases[r.ID]
	if l == nil {
		return resp, nil
	}
	resp.GrantedTTL, resp.TTL = l.ttl, l.ttl
	if l.remainingTTL > 0 {
		resp.TTL = l.remainingTTL
	}
	if r.Keys {
		for _, k := range sortedKeys(l.keys) {
			resp.Keys = append(resp.Keys, []byte(k))
		}
	}
	return resp, nil
}

// LeaseLeases lists every lease, by ID.
func (s *Store) LeaseLeases() (*pb.LeaseLeasesResponse, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return nil, err
	}
	resp := &pb.LeaseLeasesResponse{Header: &pb.ResponseHeader{Revision: s.currentRev}}
	for id := range s.leases {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
	}
	sort.Slice(resp.Leases, func(i, j int) bool { return resp.Leases[i].ID < resp.Leases[j].ID })
	return resp, nil
}

// LeaseExists reports whether a lease is granted (for the caller's pre-proposal checks).
func (s *Store) LeaseExists(id int64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.leases[id] != nil
}

// LeaseRecords returns every lease record, by ID, and the applied index they were read at.
func (s *Store) LeaseRecords() ([]*storagepb.LeaseRecord, uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return nil, 0, err
	}
	records := make([]*storagepb.LeaseRecord, 0, len(s.leases))
	for id, l := range s.leases {
		records = append(records, l.record(id))
	}
	sort.Slice(records, func(i, j int) bool { return records[i].Id < records[j].Id })
	return records, s.appliedIndex, nil
}

// KeeperState returns the leasekeeper claim as stored, with the applied index it was read at.
func (s *Store) KeeperState() (*storagepb.KeeperState, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return nil, err
	}
	state := proto.Clone(s.keeper).(*storagepb.KeeperState)
	state.AppliedIndex = s.appliedIndex
	return state, nil
}
