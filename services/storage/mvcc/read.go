package mvcc

import (
	"bytes"
	"fmt"
	"math"
	"sort"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// valueReader loads the stored KeyValue of a live revision.
type valueReader interface {
	load(rev revision) (*mvccpb.KeyValue, error)
}

// wtxReader reads through the write transaction, which holds every applied revision; only Apply uses it.
type wtxReader struct{ s *Store }

func (r wtxReader) load(rev revision) (*mvccpb.KeyValue, error) {
	if value, ok := r.s.pendingValue(rev); ok {
		// Not committed yet (a key written again soon, as under a benchmark's one key): the pending buffer's
		// bytes are never modified, so the KeyValue may share them instead of copying, and no cursor searches.
		return decodeSharedKV(rev, value)
	}
	return decodeKV(rev, r.s.wtx.Bucket(bucketKey).Get(revKey(rev, false)))
}

// pendingValue returns the stored (marshalled) KeyValue of rev from the pending buffer, if rev is above the
// committed revision; its bytes are never modified. The caller holds the store's lock.
func (s *Store) pendingValue(rev revision) ([]byte, bool) {
	if rev.main <= s.committedRev {
		return nil, false
	}
	p := s.pending
	i := sort.Search(len(p), func(i int) bool { return !rev.greaterThan(p[i].rev) })
	if i == len(p) || p[i].rev != rev {
		return nil, false
	}
	return p[i].value, true
}

// readView reads committed revisions through its own bbolt read transaction, opened on first use, and newer ones
// from the pending buffer. It is used with the store's read lock held, which keeps the buffer and committedRev
// still.
type readView struct {
	s   *Store
	tx  *bolt.Tx
	cur *bolt.Cursor // on the key bucket: one for all the view's loads, so a LIST does not allocate one per key
	key [revBytesLen]byte
}

func (v *readView) load(rev revision) (*mvccpb.KeyValue, error) {
	data, err := v.loadEncoded(rev)
	if err != nil {
		return nil, err
	}
	return decodeKV(rev, data)
}

// loadEncoded returns the stored (marshalled) KeyValue of rev, nil if there is none; the bytes are valid until
// the view is closed and must not be modified.
func (v *readView) loadEncoded(rev revision) ([]byte, error) {
	if rev.main > v.s.committedRev {
		value, ok := v.s.pendingValue(rev)
		if !ok {
			return nil, fmt.Errorf("revision %d.%d missing from the pending buffer", rev.main, rev.sub)
		}
		return value, nil
	}
	if err := v.begin(); err != nil {
		return nil, err
	}
	key := appendRevKey(v.key[:0], rev)
	if k, value := v.cur.Seek(key); bytes.Equal(k, key) {
		return value, nil
	}
	return nil, nil
}

// begin opens the view's read transaction, unless it is open.
func (v *readView) begin() error {
	if v.tx != nil {
		return nil
	}
	tx, err := v.s.db.Begin(false)
	if err != nil {
		return fmt.Errorf("begin bbolt read tx: %w", err)
	}
	v.tx, v.cur = tx, tx.Bucket(bucketKey).Cursor()
	return nil
}

func (v *readView) close() {
	if v.tx != nil {
		_ = v.tx.Rollback()
		v.tx, v.cur = nil, nil
	}
}

func decodeKV(rev revision, data []byte) (*mvccpb.KeyValue, error) {
	if data == nil {
		return nil, fmt.Errorf("revision %d.%d missing from the key bucket", rev.main, rev.sub)
	}
	kv := &mvccpb.KeyValue{}
	if err := proto.Unmarshal(data, kv); err != nil {
		return nil, fmt.Errorf("decode revision %d.%d: %w", rev.main, rev.sub, err)
	}
	return kv, nil
}

// Range answers an etcd RangeRequest from local state (the caller decides about linearizability).
func (s *Store) Range(r *pb.RangeRequest) (resp *pb.RangeResponse, err error) {
	err = s.read(func(v *readView) error {
		resp, err = s.rangeLocked(r, s.currentRev, v)
		return err
	})
	return resp, err
}

// read runs fn on a read view of the usable store, with the read lock held.
func (s *Store) read(fn func(v *readView) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	v := &readView{s: s}
	defer v.close()
	return fn(v)
}

// ReadTxn answers a read-only txn (see IsTxnReadOnly) from local state, without the log.
func (s *Store) ReadTxn(r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if !IsTxnReadOnly(r) {
		return nil, fmt.Errorf("ReadTxn of a txn with writes")
	}
	var resp *pb.TxnResponse
	var refused error
	if err := s.read(func(v *readView) (err error) {
		w := &writeTxn{s: s, values: v, beginRev: s.currentRev}
		resp, refused, err = w.applyTxn(r)
		return err
	}); err != nil {
		return nil, err
	}
	return resp, refused
}

// rangeLocked is etcd's range: revision checks, key selection at the revision, filters, sort, limit.
func (s *Store) rangeLocked(r *pb.RangeRequest, curRev int64, values valueReader) (*pb.RangeResponse, error) {
	resp, hits, err := s.rangeHitsLocked(r, curRev)
	if err != nil || r.CountOnly {
		return resp, err
	}
	fastKeysOnly := r.KeysOnly && r.SortTarget != pb.RangeRequest_VALUE
	kvs := make([]*mvccpb.KeyValue, 0, len(hits))
	for _, hit := range hits {
		if fastKeysOnly {
			kvs = append(kvs, &mvccpb.KeyValue{Key: hit.key, CreateRevision: hit.ver.created,
				ModRevision: hit.ver.rev.main, Version: hit.ver.version})
			continue
		}
		kv, err := values.load(hit.ver.rev)
		if err != nil {
			return nil, err
		}
		if err := s.openKV(kv); err != nil {
			return nil, err
		}
		kvs = append(kvs, kv)
	}
	kvs = filterKVs(kvs, r)
	sortKVs(kvs, r)
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs = kvs[:r.Limit]
		resp.More = true
	}
	if r.KeysOnly {
		for _, kv := range kvs {
			kv.Value = nil
		}
	}
	resp.Kvs = kvs
	return resp, nil
}

// openKV replaces the stored value of kv, freshly decoded and owned by the caller, by its plain value (see
// Config.Opener).
func (s *Store) openKV(kv *mvccpb.KeyValue) error {
	if s.cfg.Opener == nil || kv == nil {
		return nil
	}
	plain, err := s.cfg.Opener.AppendOpen(nil, kv.Key, kv.Value)
	if err != nil {
		return fmt.Errorf("revision %d: %w", kv.ModRevision, err)
	}
	kv.Value = plain
	return nil
}

// rangeHit is a key a range found live at its revision, with that version.
type rangeHit struct {
	key []byte
	ver keyVersion
}

// rangeHitsLocked checks r's revision and walks the index: it returns the response with its header and count,
// and the live keys to load (as many as rangeLimit says), in key order.
func (s *Store) rangeHitsLocked(r *pb.RangeRequest, curRev int64) (*pb.RangeResponse, []rangeHit, error) {
	rev := r.Revision
	if rev > curRev {
		return nil, nil, s.checkRangeRev(rev, curRev)
	}
	if rev <= 0 {
		rev = curRev
	}
	if rev < s.compactRev {
		return nil, nil, s.checkRangeRev(rev, curRev)
	}
	kr := keyRange{key: r.Key, end: r.RangeEnd}
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: curRev}}
	limit := rangeLimit(r)
	var hits []rangeHit
	total := int64(0)
	s.index.visit(kr, func(h *keyHistory) bool {
		if ver, ok := h.at(rev); ok {
			total++
			if !r.CountOnly && (limit <= 0 || int64(len(hits)) < limit) {
				hits = append(hits, rangeHit{h.key, ver})
			}
		}
		return true
	})
	resp.Count = total
	return resp, hits, nil
}

// rangeLimit is how many keys to read: one more than asked, to know about "more", unless results are
// re-sorted or filtered, which needs them all.
func rangeLimit(r *pb.RangeRequest) int64 {
	limit := r.Limit
	if !isDefaultOrdering(r) || hasRevisionFilters(r) {
		limit = 0
	}
	if limit > 0 && limit < math.MaxInt64 {
		limit++
	}
	return limit
}

func isDefaultOrdering(r *pb.RangeRequest) bool {
	return r.SortOrder == pb.RangeRequest_NONE ||
		(r.SortTarget == pb.RangeRequest_KEY && r.SortOrder == pb.RangeRequest_ASCEND)
}

func hasRevisionFilters(r *pb.RangeRequest) bool {
	return r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
}

func filterKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) []*mvccpb.KeyValue {
	if !hasRevisionFilters(r) {
		return kvs
	}
	out := kvs[:0]
	for _, kv := range kvs {
		switch {
		case r.MaxModRevision != 0 && kv.ModRevision > r.MaxModRevision:
		case r.MinModRevision != 0 && kv.ModRevision < r.MinModRevision:
		case r.MaxCreateRevision != 0 && kv.CreateRevision > r.MaxCreateRevision:
		case r.MinCreateRevision != 0 && kv.CreateRevision < r.MinCreateRevision:
		default:
			out = append(out, kv)
		}
	}
	return out
}

// sortKVs re-sorts results as etcd does: a non-KEY target with order NONE means ascending; sort.Sort (not
// stable) as in etcd.
func sortKVs(kvs []*mvccpb.KeyValue, r *pb.RangeRequest) {
	order := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE {
		order = pb.RangeRequest_ASCEND
	}
	if order == pb.RangeRequest_NONE || (r.SortTarget == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND) {
		return
	}
	var less func(a, b *mvccpb.KeyValue) bool
	switch r.SortTarget {
	case pb.RangeRequest_KEY:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }
	case pb.RangeRequest_VERSION:
		less = func(a, b *mvccpb.KeyValue) bool { return a.Version < b.Version }
	case pb.RangeRequest_CREATE:
		less = func(a, b *mvccpb.KeyValue) bool { return a.CreateRevision < b.CreateRevision }
	case pb.RangeRequest_MOD:
		less = func(a, b *mvccpb.KeyValue) bool { return a.ModRevision < b.ModRevision }
	case pb.RangeRequest_VALUE:
		less = func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Value, b.Value) < 0 }
	default:
		return
	}
	s := kvSorter{kvs, less}
	switch order {
	case pb.RangeRequest_ASCEND:
		sort.Sort(s)
	case pb.RangeRequest_DESCEND:
		sort.Sort(sort.Reverse(s))
	}
}

type kvSorter struct {
	kvs  []*mvccpb.KeyValue
	less func(a, b *mvccpb.KeyValue) bool
}

func (s kvSorter) Len() int           { return len(s.kvs) }
func (s kvSorter) Swap(i, j int)      { s.kvs[i], s.kvs[j] = s.kvs[j], s.kvs[i] }
func (s kvSorter) Less(i, j int) bool { return s.less(s.kvs[i], s.kvs[j]) }
