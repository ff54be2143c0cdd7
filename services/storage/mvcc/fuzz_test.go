package mvcc

import (
	"bytes"
	"fmt"
	"sort"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// model is the simplest possible MVCC: every version of every key kept in a slice, compaction as a number.
type model struct {
	rev, compactRev int64
	versions        map[string][]*mvccpb.KeyValue // nil entry: deleted at that revision (ModRevision in tomb)
	tombRevs        map[string][]int64
	leases          map[int64]bool
}

func newModel() *model {
	return &model{rev: 1, versions: map[string][]*mvccpb.KeyValue{}, tombRevs: map[string][]int64{}, leases: map[int64]bool{}}
}

// at returns the version of key visible at rev.
func (m *model) at(key string, rev int64) *mvccpb.KeyValue {
	var cur *mvccpb.KeyValue
	vs := m.versions[key]
	for _, kv := range vs {
		if kv.ModRevision > rev {
			break
		}
		cur = kv
		if kv.Version == 0 {
			cur = nil
		}
	}
	return cur
}

func (m *model) keys() []string {
	var ks []string
	for k := range m.versions {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (m *model) put(key, value string, lease int64) {
	m.rev++
	kv := &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), CreateRevision: m.rev, ModRevision: m.rev, Version: 1, Lease: lease}
	if prev := m.at(key, m.rev); prev != nil {
		kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
	}
	m.versions[key] = append(m.versions[key], kv)
}

func (m *model) deleteRange(kr keyRange) {
	var live []string
	for _, k := range m.keys() {
		if kr.contains([]byte(k)) && m.at(k, m.rev) != nil {
			live = append(live, k)
		}
	}
	if len(live) == 0 {
		return
	}
	m.rev++
	for _, k := range live {
		m.versions[k] = append(m.versions[k], &mvccpb.KeyValue{Key: []byte(k), ModRevision: m.rev})
	}
}

func (m *model) rangeKeys(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	rev := r.Revision
	if rev > m.rev {
		return nil, rpctypes.ErrGRPCFutureRev
	}
	if rev <= 0 {
		rev = m.rev
	}
	if rev < m.compactRev {
		return nil, rpctypes.ErrGRPCCompacted
	}
	kr := keyRange{key: r.Key, end: r.RangeEnd}
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: m.rev}}
	for _, k := range m.keys() {
		kv := m.at(k, rev)
		if !kr.contains([]byte(k)) || kv == nil {
			continue
		}
		resp.Count++
		if r.CountOnly {
			continue
		}
		if r.Limit > 0 && int64(len(resp.Kvs)) == r.Limit {
			resp.More = true
			continue
		}
		out := proto.Clone(kv).(*mvccpb.KeyValue)
		if r.KeysOnly {
			out.Value, out.Lease = nil, 0
		}
		resp.Kvs = append(resp.Kvs, out)
	}
	return resp, nil
}

// fuzzOps decodes a byte string into an op sequence and runs it on the store and the model, comparing every read.
func runFuzzOps(t *testing.T, data []byte) {
	ts := openTestStore(t, Config{BatchLimit: 7, CompactionBatchLimit: 5})
	m := newModel()
	keyOf := func(b byte) string { return string(rune('a' + b%6)) }
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	for steps := 0; len(data) > 0 && steps < 400; steps++ {
		op, arg := next(), next()
		switch op % 9 {
		case 0, 1, 2: // put, maybe with a lease
			lease := int64(0)
			if arg&0x80 != 0 && m.leases[int64(arg%3)+1] {
				lease = int64(arg%3) + 1
			}
			value := fmt.Sprint(steps)
			ts.apply(put(keyOf(arg), value, withLease(lease)))
			m.put(keyOf(arg), value, lease)
		case 3: // delete a key or a range
			end := ""
			if arg&0x80 != 0 {
				end = keyOf(arg + 2)
			}
			ts.apply(del(keyOf(arg), end, false))
			m.deleteRange(keyRange{key: []byte(keyOf(arg)), end: bytesOrNil(end)})
		case 4: // compact somewhere at or below the current revision
			rev := m.compactRev + int64(arg)%(m.rev-m.compactRev+1)
			res := ts.apply(compact(rev))
			if rev > m.compactRev {
				m.compactRev = rev
				if res.Err != nil {
					t.Fatalf("compact(%d): %v", rev, res.Err)
				}
			}
		case 5: // grant or revoke a lease
			id := int64(arg%3) + 1
			if m.leases[id] {
				ts.apply(revoke(id))
				delete(m.leases, id)
				var attached []string
				for _, k := range m.keys() {
					if kv := m.at(k, m.rev); kv != nil && kv.Lease == id {
						attached = append(attached, k)
					}
				}
				if len(attached) > 0 {
					m.rev++
					for _, k := range attached {
						m.versions[k] = append(m.versions[k], &mvccpb.KeyValue{Key: []byte(k), ModRevision: m.rev})
					}
				}
			} else {
				ts.apply(grant(id, 60))
				m.leases[id] = true
			}
		case 6: // reopen: everything applied survives (Close commits)
			ts = reopen(t, ts)
		case 7, 8: // read
			r := &pb.RangeRequest{Key: []byte(keyOf(arg))}
			if arg&0x10 != 0 {
				r.RangeEnd = []byte(keyOf(arg + 3))
			}
			if arg&0x20 != 0 {
				r.RangeEnd = []byte{0}
			}
			if arg&0x40 != 0 {
				r.Revision = m.rev - int64(next()%8)
			}
			r.Limit = int64(next() % 4)
			r.KeysOnly, r.CountOnly = arg&0x80 != 0, op&0x40 != 0
			got, gotErr := ts.Range(r)
			want, wantErr := m.rangeKeys(r)
			if gotErr != wantErr || (gotErr == nil && !proto.Equal(got, want)) {
				t.Fatalf("step %d Range %v:\n got %v %v\nwant %v %v", steps, r, got, gotErr, want, wantErr)
			}
			checkRangeEncoded(t, ts, r, got, gotErr)
		}
		if p := ts.Position(); p.Revision != m.rev {
			t.Fatalf("step %d: store revision %d, model %d", steps, p.Revision, m.rev)
		}
	}
	// Every live key at the end, and the history from the compact revision, agree too.
	got, _ := ts.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	want, _ := m.rangeKeys(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if !proto.Equal(got, want) {
		t.Fatalf("final state:\n got %v\nwant %v", got, want)
	}
	from := max(m.compactRev, 1)
	page, err := ts.History(HistoryQuery{Key: []byte{0}, RangeEnd: []byte{0}, From: from, To: m.rev})
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	wantEvents := 0
	for _, vs := range m.versions {
		for _, kv := range vs {
			if kv.ModRevision >= from {
				wantEvents++
			}
		}
	}
	if len(page.Events) != wantEvents {
		t.Fatalf("history from %d has %d events, model %d", from, len(page.Events), wantEvents)
	}
	for i := 1; i < len(page.Events); i++ {
		if page.Events[i].Kv.ModRevision < page.Events[i-1].Kv.ModRevision {
			t.Fatalf("history out of order at %d", i)
		}
	}
	_ = bytes.Compare
}

// FuzzMVCC applies random op sequences to the store and to the model and compares every read; run the seed corpus
// with go test, or explore with go test -fuzz=FuzzMVCC ./services/storage/mvcc.
func FuzzMVCC(f *testing.F) {
	seeds := [][]byte{
		{0, 1, 0, 2, 7, 1, 0, 3, 0, 1, 8, 0x51, 1},
		{0, 0, 0, 0, 0, 0, 3, 0, 7, 0x40, 2, 1, 4, 3, 7, 0x40, 5, 0},
		{5, 0, 0, 0x80, 1, 0x81, 7, 0x20, 0, 5, 0, 7, 0x30, 3, 8, 0x20, 0},
		{0, 1, 1, 2, 2, 3, 4, 200, 6, 0, 7, 0x70, 3, 2, 3, 0x81, 7, 0x20, 0},
		{0, 4, 0, 4, 3, 4, 0, 4, 4, 1, 6, 0, 7, 0x44, 2, 1, 8, 0x64, 5, 2},
		bytes.Repeat([]byte{0, 1, 1, 2, 3, 0x82, 4, 9, 7, 0x61, 2, 3, 5, 1, 0, 0x81, 6, 0}, 12),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { runFuzzOps(t, data) })
}
