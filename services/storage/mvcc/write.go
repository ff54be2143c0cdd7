package mvcc

import (
	"fmt"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// writeTxn is one entry's changes: they all take main revision beginRev+1 with increasing sub-revisions, and
// become visible to other readers together when Apply releases the store lock. Reads inside the entry see its own
// earlier changes, as in etcd.
type writeTxn struct {
	s            *Store
	index        uint64 // log index of the entry
	values       valueReader
	beginRev     int64
	changes      int64
	events       []*mvccpb.Event
	leaseChanges []LeaseChange
}

func (s *Store) newWriteTxn() *writeTxn {
	return &writeTxn{s: s, values: wtxReader{s}, beginRev: s.currentRev}
}

// readRev is the revision reads inside the entry see.
func (w *writeTxn) readRev() int64 {
	if w.changes > 0 {
		return w.beginRev + 1
	}
	return w.beginRev
}

// end makes the entry's changes the current revision.
func (w *writeTxn) end() {
	if w.changes > 0 {
		w.s.currentRev = w.beginRev + 1
	}
}

// writeRevision stores one key-bucket record in the write transaction and in the pending buffer.
func (w *writeTxn) writeRevision(rev revision, tombstone bool, kv *mvccpb.KeyValue) error {
	data, err := proto.Marshal(kv)
	if err != nil {
		return fmt.Errorf("marshal key %q at revision %d: %w", kv.Key, rev.main, err)
	}
	key := revKey(rev, tombstone)
	b := w.s.wtx.Bucket(bucketKey)
	b.FillPercent = 0.9 // revisions only ever grow: pack pages
	if err := b.Put(key, data); err != nil {
		return fmt.Errorf("write key %q at revision %d: %w", kv.Key, rev.main, err)
	}
	w.s.pending = append(w.s.pending, pendingKV{rev: rev, key: key, value: data})
	w.changes++
	return nil
}

// keptPending is the most pending entries whose buffer a commit keeps for the next batch: grown afresh from
// nothing after every commit, it cost two entries' room (128 bytes) per write on every member.
const keptPending = 1024

// reusePending empties pending for the next batch, keeping its buffer unless it is larger than keptPending.
// Readers use the buffer only under the store's lock, which the caller holds for writing.
func reusePending(pending []pendingKV) []pendingKV {
	if cap(pending) > keptPending {
		return nil
	}
	clear(pending) // keep no write's bytes alive
	return pending[:0]
}

// put writes a new version of key and returns the version it replaced, if any.
func (w *writeTxn) put(key, value []byte, lease int64) (*mvccpb.KeyValue, error) {
	rev := revision{main: w.beginRev + 1, sub: w.changes}
	var prevKV *mvccpb.KeyValue
	prevLease := int64(0)
	if h := w.s.index.get(key); h != nil {
		if prev, ok := h.latest(); ok {
			var err error
			if prevKV, err = w.values.load(prev.rev); err != nil {
				return nil, err
			}
			prevLease = prev.lease
		}
	}
	ver := w.s.index.put(key, rev, lease)
	kv := &mvccpb.KeyValue{Key: key, Value: value, CreateRevision: ver.created, ModRevision: rev.main,
		Version: ver.version, Lease: lease}
	if err := w.writeRevision(rev, false, kv); err != nil {
		return nil, err
	}
	if prevLease != lease {
		w.s.detachLease(prevLease, kv.Key)
		w.s.attachLease(lease, kv.Key)
	}
	w.events = append(w.events, &mvccpb.Event{Type: mvccpb.Event_PUT, Kv: kv, PrevKv: prevKV})
	return prevKV, nil
}

// deleteRange deletes every key in r that exists and returns the deleted versions, in key order.
func (w *writeTxn) deleteRange(r keyRange) ([]*mvccpb.KeyValue, error) {
	var live []*keyHistory
	w.s.index.visit(r, func(h *keyHistory) bool {
		if _, ok := h.latest(); ok {
			live = append(live, h)
		}
		return true
	})
	deleted := make([]*mvccpb.KeyValue, 0, len(live))
	for _, h := range live {
		prevKV, err := w.deleteKey(h)
		if err != nil {
			return nil, err
		}
		deleted = append(deleted, prevKV)
	}
	return deleted, nil
}

func (w *writeTxn) deleteKey(h *keyHistory) (*mvccpb.KeyValue, error) {
	prev, _ := h.latest()
	prevKV, err := w.values.load(prev.rev)
	if err != nil {
		return nil, err
	}
	rev := revision{main: w.beginRev + 1, sub: w.changes}
	w.s.index.tombstone(h.key, rev)
	if err := w.writeRevision(rev, true, &mvccpb.KeyValue{Key: h.key}); err != nil {
		return nil, err
	}
	w.s.detachLease(prev.lease, h.key)
	w.events = append(w.events, &mvccpb.Event{Type: mvccpb.Event_DELETE,
		Kv: &mvccpb.KeyValue{Key: h.key, ModRevision: rev.main}, PrevKv: prevKV})
	return prevKV, nil
}

// checkPut is etcd's apply-time check of a put: its lease must exist, and ignore_value/ignore_lease need the key.
func (w *writeTxn) checkPut(p *pb.PutRequest) error {
	if p.Lease != 0 && w.s.leases[p.Lease] == nil {
		return rpctypes.ErrGRPCLeaseNotFound
	}
	if p.IgnoreValue || p.IgnoreLease {
		if _, ok := w.current(p.Key); !ok {
			return rpctypes.ErrGRPCKeyNotFound
		}
	}
	return nil
}

// current returns key's version visible inside the entry.
func (w *writeTxn) current(key []byte) (keyVersion, bool) {
	if h := w.s.index.get(key); h != nil {
		return h.latest()
	}
	return keyVersion{}, false
}

// doPut executes a checked put.
func (w *writeTxn) doPut(p *pb.PutRequest) (*pb.PutResponse, error) {
	value, lease := p.Value, p.Lease
	if p.IgnoreValue || p.IgnoreLease {
		cur, _ := w.current(p.Key)
		if p.IgnoreLease {
			lease = cur.lease
		}
		if p.IgnoreValue {
			prev, err := w.values.load(cur.rev)
			if err != nil {
				return nil, err
			}
			value = prev.Value
		}
	}
	prevKV, err := w.put(p.Key, value, lease)
	if err != nil {
		return nil, err
	}
	resp := &pb.PutResponse{Header: &pb.ResponseHeader{Revision: w.beginRev + 1}}
	if p.PrevKv {
		resp.PrevKv = prevKV
	}
	return resp, nil
}

func (w *writeTxn) applyPut(p *pb.PutRequest) (*pb.PutResponse, error, error) {
	if err := w.checkPut(p); err != nil {
		return nil, err, nil
	}
	resp, err := w.doPut(p)
	return resp, nil, err
}

func (w *writeTxn) doDeleteRange(dr *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	deleted, err := w.deleteRange(keyRange{key: dr.Key, end: dr.RangeEnd})
	if err != nil {
		return nil, err
	}
	resp := &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{Revision: w.readRev()}, Deleted: int64(len(deleted))}
	if dr.PrevKv {
		resp.PrevKvs = deleted
	}
	return resp, nil
}

func (w *writeTxn) applyDeleteRange(dr *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return w.doDeleteRange(dr)
}

// sortedKeys returns the keys of a set in byte order, so every member deletes them in the same order.
func sortedKeys(set map[string]struct{}) []string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
