package mvcc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

func TestApplyEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup []*pb.InternalRaftRequest
		req   *pb.InternalRaftRequest
		want  []*mvccpb.Event
	}{
		{"put new key", nil, put("a", "1"), []*mvccpb.Event{
			{Type: mvccpb.Event_PUT, Kv: &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1}}}},
		{"put over key has prev kv", []*pb.InternalRaftRequest{put("a", "1")}, put("a", "2"), []*mvccpb.Event{
			{Type: mvccpb.Event_PUT, Kv: &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("2"), CreateRevision: 2, ModRevision: 3, Version: 2},
				PrevKv: &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1}}}},
		{"delete range", []*pb.InternalRaftRequest{put("a", "1"), put("b", "2")}, del("a", "\x00", false), []*mvccpb.Event{
			{Type: mvccpb.Event_DELETE, Kv: &mvccpb.KeyValue{Key: []byte("a"), ModRevision: 4},
				PrevKv: &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1}},
			{Type: mvccpb.Event_DELETE, Kv: &mvccpb.KeyValue{Key: []byte("b"), ModRevision: 4},
				PrevKv: &mvccpb.KeyValue{Key: []byte("b"), Value: []byte("2"), CreateRevision: 3, ModRevision: 3, Version: 1}}}},
		{"no-op delete", nil, del("a", "", false), nil},
		{"read-only txn", []*pb.InternalRaftRequest{put("a", "1")}, txn(nil, ops(get("a", "")), nil), nil},
		{"txn events in op order", nil, txn(nil, ops(put("b", "1"), put("a", "1")), nil), []*mvccpb.Event{
			{Type: mvccpb.Event_PUT, Kv: &mvccpb.KeyValue{Key: []byte("b"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1}},
			{Type: mvccpb.Event_PUT, Kv: &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1}}}},
		{"revoke deletes keys in one revision", []*pb.InternalRaftRequest{grant(5, 60), put("b", "1", withLease(5)), put("a", "1", withLease(5))},
			revoke(5), []*mvccpb.Event{
				{Type: mvccpb.Event_DELETE, Kv: &mvccpb.KeyValue{Key: []byte("a"), ModRevision: 4},
					PrevKv: &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("1"), CreateRevision: 3, ModRevision: 3, Version: 1, Lease: 5}},
				{Type: mvccpb.Event_DELETE, Kv: &mvccpb.KeyValue{Key: []byte("b"), ModRevision: 4},
					PrevKv: &mvccpb.KeyValue{Key: []byte("b"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1, Lease: 5}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := openTestStore(t, Config{})
			for _, r := range tc.setup {
				ts.apply(r)
			}
			res := ts.apply(tc.req)
			if res.Err != nil {
				t.Fatalf("apply: %v", res.Err)
			}
			if len(res.Events) != len(tc.want) {
				t.Fatalf("got %d events %v, want %d", len(res.Events), res.Events, len(tc.want))
			}
			for i := range tc.want {
				if !proto.Equal(res.Events[i], tc.want[i]) {
					t.Errorf("event %d = %v, want %v", i, res.Events[i], tc.want[i])
				}
			}
		})
	}
}

func TestLeaseChangesAndTimeToLive(t *testing.T) {
	t.Parallel()
	ts := openTestStore(t, Config{})
	tests := []struct {
		name string
		req  *pb.InternalRaftRequest
		want []LeaseChange
	}{
		{"grant raises to min ttl", grant(1, 1), []LeaseChange{{Type: LeaseGranted, ID: 1, TTL: 2}}},
		{"grant", grant(2, 30), []LeaseChange{{Type: LeaseGranted, ID: 2, TTL: 30}}},
		{"attach", put("k", "v", withLease(2)), nil},
		{"checkpoint skips unknown", &pb.InternalRaftRequest{LeaseCheckpoint: &pb.LeaseCheckpointRequest{Checkpoints: []*pb.LeaseCheckpoint{
			{ID: 2, Remaining_TTL: 12}, {ID: 99, Remaining_TTL: 1}}}}, []LeaseChange{{Type: LeaseCheckpointed, ID: 2, RemainingTTL: 12}}},
		{"revoke", revoke(1), []LeaseChange{{Type: LeaseRevoked, ID: 1}}},
	}
	for _, tc := range tests {
		res := ts.apply(tc.req)
		if res.Err != nil || fmt.Sprint(res.Leases) != fmt.Sprint(tc.want) {
			t.Errorf("%s: leases %v err %v, want %v", tc.name, res.Leases, res.Err, tc.want)
		}
	}
	ttl, err := ts.LeaseTimeToLive(&pb.LeaseTimeToLiveRequest{ID: 2, Keys: true})
	if err != nil || ttl.TTL != 12 || ttl.GrantedTTL != 30 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "k" {
		t.Errorf("TimeToLive(2) = %v, %v; want TTL 12, granted 30, keys [k]", ttl, err)
	}
	if ttl, _ := ts.LeaseTimeToLive(&pb.LeaseTimeToLiveRequest{ID: 1}); ttl.TTL != -1 {
		t.Errorf("TimeToLive of revoked lease: TTL %d, want -1", ttl.TTL)
	}
	if ls, _ := ts.LeaseLeases(); len(ls.Leases) != 1 || ls.Leases[0].ID != 2 {
		t.Errorf("Leases = %v, want [2]", ls.Leases)
	}
	// Leases, their keys and checkpoints survive a reopen.
	reopened := reopen(t, ts)
	ttl, _ = reopened.LeaseTimeToLive(&pb.LeaseTimeToLiveRequest{ID: 2, Keys: true})
	if ttl.TTL != 12 || len(ttl.Keys) != 1 {
		t.Errorf("after reopen TimeToLive(2) = %v", ttl)
	}
}

// reopen closes ts and opens its file again.
func reopen(t *testing.T, ts *testStore) *testStore {
	t.Helper()
	if err := ts.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return openTestStore(t, Config{Path: ts.cfg.Path, BatchLimit: ts.cfg.BatchLimit, CompactionBatchLimit: ts.cfg.CompactionBatchLimit})
}

func TestReplayIsNoop(t *testing.T) {
	t.Parallel()
	ts := openTestStore(t, Config{})
	ts.apply(put("a", "1"))
	ts.apply(put("a", "2"))
	for _, index := range []uint64{1, 2} {
		res, err := ts.Apply(index, 1, put("a", "again"))
		if err != nil || res != nil {
			t.Fatalf("re-apply of index %d = %v, %v; want skipped", index, res, err)
		}
	}
	if err := ts.ApplyNoop(3, 2); err != nil {
		t.Fatal(err)
	}
	if p := ts.Position(); p.AppliedIndex != 3 || p.AppliedTerm != 2 || p.Revision != 3 {
		t.Fatalf("position %+v, want applied 3 term 2 revision 3", p)
	}
	r, _ := ts.Range(&pb.RangeRequest{Key: []byte("a")})
	if string(r.Kvs[0].Value) != "2" {
		t.Fatalf("value %q, want 2", r.Kvs[0].Value)
	}
}

func TestReopenRestoresState(t *testing.T) {
	t.Parallel()
	ts := openTestStore(t, Config{})
	for i := range 50 {
		ts.apply(put(fmt.Sprintf("k%02d", i%10), fmt.Sprint(i)))
	}
	ts.apply(del("k05", "", false))
	ts.apply(compact(30))
	ts.apply(&pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 7, Alarm: pb.AlarmType_NOSPACE}})
	before, _ := ts.Hash(0)
	beforeRange, _ := ts.Range(&pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), Revision: 35})
	pos := ts.Position()
	after := reopen(t, ts)
	if got := after.Position(); got.AppliedIndex != pos.AppliedIndex || got.Revision != pos.Revision || got.CompactRev != 30 {
		t.Fatalf("position after reopen %+v, want %+v", got, pos)
	}
	h, _ := after.Hash(0)
	if h.Hash != before.Hash {
		t.Fatalf("hash after reopen %d, want %d", h.Hash, before.Hash)
	}
	r, _ := after.Range(&pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), Revision: 35})
	if !proto.Equal(r, beforeRange) {
		t.Fatalf("range after reopen %v, want %v", r, beforeRange)
	}
	if a := after.Alarms(pb.AlarmType_NONE); len(a) != 1 || a[0].MemberID != 7 {
		t.Fatalf("alarms after reopen %v", a)
	}
}

func TestCompactionRemovesRevisionsPhysically(t *testing.T) {
	t.Parallel()
	ts := openTestStore(t, Config{CompactionBatchLimit: 7, CompactionSleepInterval: time.Millisecond})
	for i := range 100 {
		ts.apply(put(fmt.Sprintf("k%d", i%10), fmt.Sprint(i)))
	}
	ts.apply(del("k0", "", false)) // revision 102
	hashBefore, _ := ts.Hash(0)
	res := ts.apply(compact(102))
	select {
	case <-res.Compacted:
	case <-time.After(10 * time.Second):
		t.Fatal("physical compaction did not finish")
	}
	if err := ts.Commit(); err != nil {
		t.Fatal(err)
	}
	hashAfter, _ := ts.Hash(0)
	if hashAfter.CompactRevision != 102 || hashAfter.HashRevision != 102 {
		t.Fatalf("hash after compaction %+v", hashAfter)
	}
	if hashBefore.Hash == hashAfter.Hash {
		t.Fatalf("hash did not change with compaction")
	}
	// k1..k9 keep their newest version, k0's tombstone at exactly the compact revision stays: 10 revisions.
	n := 0
	err := ts.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketKey).ForEach(func(k, v []byte) error { n++; return nil })
	})
	if err != nil || n != 10 {
		t.Fatalf("key bucket holds %d revisions (%v), want 10", n, err)
	}
	// Another member that compacted without removing anything yet (fresh reopen mid-compaction) hashes the same.
	reopened := reopen(t, ts)
	h, _ := reopened.Hash(0)
	if h.Hash != hashAfter.Hash {
		t.Fatalf("hash after reopen %d, want %d", h.Hash, hashAfter.Hash)
	}
}

func TestHashIndependentOfCompactionProgress(t *testing.T) {
	t.Parallel()
	build := func(sleep time.Duration) *testStore {
		ts := openTestStore(t, Config{CompactionBatchLimit: 3, CompactionSleepInterval: sleep})
		for i := range 60 {
			ts.apply(put(fmt.Sprintf("k%d", i%7), fmt.Sprint(i)))
		}
		ts.apply(compact(40))
		return ts
	}
	fast, slow := build(time.Microsecond), build(time.Hour)
	deadline := time.Now().Add(10 * time.Second)
	var hf, hs *pb.HashKVResponse
	for time.Now().Before(deadline) {
		hf, _ = fast.Hash(0)
		hs, _ = slow.Hash(0)
		if hf.Hash == hs.Hash {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if hf.Hash != hs.Hash {
		t.Fatalf("hash with compaction done %d != hash with compaction pending %d", hf.Hash, hs.Hash)
	}
	if _, err := fast.Hash(39); err != rpctypes.ErrGRPCCompacted {
		t.Fatalf("Hash below compact revision: %v, want ErrGRPCCompacted", err)
	}
	if _, err := fast.Hash(1000); err != rpctypes.ErrGRPCFutureRev {
		t.Fatalf("Hash of future revision: %v, want ErrGRPCFutureRev", err)
	}
}

func TestHistory(t *testing.T) {
	t.Parallel()
	ts := openTestStore(t, Config{BatchLimit: 3})
	ts.apply(put("a", "1"))                                    // 2
	ts.apply(put("b", "1"))                                    // 3
	ts.apply(txn(nil, ops(put("a", "2"), put("c", "1")), nil)) // 4
	ts.apply(del("a", "", false))                              // 5
	ts.apply(put("a", "3"))                                    // 6
	ev := func(typ mvccpb.Event_EventType, key string, rev int64) string {
		return fmt.Sprintf("%v %s@%d", typ, key, rev)
	}
	tests := []struct {
		name string
		q    HistoryQuery
		want []string
		more bool
		err  error
	}{
		{"all", HistoryQuery{Key: []byte("a"), RangeEnd: []byte("\x00"), From: 1, To: 6},
			[]string{ev(0, "a", 2), ev(0, "b", 3), ev(0, "a", 4), ev(0, "c", 4), ev(1, "a", 5), ev(0, "a", 6)}, false, nil},
		{"one key interval", HistoryQuery{Key: []byte("a"), From: 3, To: 5}, []string{ev(0, "a", 4), ev(1, "a", 5)}, false, nil},
		{"range", HistoryQuery{Key: []byte("b"), RangeEnd: []byte("d"), From: 1, To: 6}, []string{ev(0, "b", 3), ev(0, "c", 4)}, false, nil},
		{"paged", HistoryQuery{Key: []byte("a"), RangeEnd: []byte("\x00"), From: 3, To: 6, Limit: 2},
			[]string{ev(0, "b", 3), ev(0, "a", 4)}, true, nil},
		{"resume inside a revision", HistoryQuery{Key: []byte("a"), RangeEnd: []byte("\x00"), From: 4, FromSub: 1, To: 6, Limit: 2},
			[]string{ev(0, "c", 4), ev(1, "a", 5)}, true, nil},
		{"future", HistoryQuery{Key: []byte("a"), From: 1, To: 7}, nil, false, rpctypes.ErrGRPCFutureRev},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			page, err := ts.History(tc.q)
			if err != tc.err {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			var got []string
			for _, e := range page.Events {
				got = append(got, ev(e.Type, string(e.Kv.Key), e.Kv.ModRevision))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || page.More != tc.more {
				t.Fatalf("events %v more %v, want %v more %v", got, page.More, tc.want, tc.more)
			}
		})
	}
	page, _ := ts.History(HistoryQuery{Key: []byte("a"), From: 5, To: 6, PrevKV: true})
	if page.Events[0].PrevKv == nil || string(page.Events[0].PrevKv.Value) != "2" || page.Events[1].PrevKv != nil {
		t.Fatalf("prev kvs %v / %v, want a=2 then none", page.Events[0].PrevKv, page.Events[1].PrevKv)
	}
	ts.apply(compact(4))
	if _, err := ts.History(HistoryQuery{Key: []byte("a"), From: 3, To: 6}); err != rpctypes.ErrGRPCCompacted {
		t.Fatalf("history below compact revision: %v, want ErrGRPCCompacted", err)
	}
	page, err := ts.History(HistoryQuery{Key: []byte("a"), RangeEnd: []byte("\x00"), From: 4, To: 6, PrevKV: true})
	if err != nil || len(page.Events) != 4 || page.Events[2].PrevKv == nil {
		t.Fatalf("history from compact revision: %v %v", page, err)
	}
}

func TestAlarmsCapWrites(t *testing.T) {
	t.Parallel()
	ts := openTestStore(t, Config{})
	ts.apply(put("a", "1"))
	activate := func(typ pb.AlarmType) *pb.InternalRaftRequest {
		return &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 1, Alarm: typ}}
	}
	deactivate := &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: 1, Alarm: pb.AlarmType_NOSPACE}}
	res := ts.apply(activate(pb.AlarmType_NOSPACE))
	if len(res.Alarms) != 1 || len(res.Response.(*pb.AlarmResponse).Alarms) != 1 {
		t.Fatalf("activate: %v", res)
	}
	tests := []struct {
		name string
		req  *pb.InternalRaftRequest
		want error
	}{
		{"put refused", put("b", "1"), rpctypes.ErrGRPCNoSpace},
		{"txn with put refused", txn(nil, nil, ops(put("b", "1"))), rpctypes.ErrGRPCNoSpace},
		{"lease grant refused", grant(1, 10), rpctypes.ErrGRPCNoSpace},
		{"delete allowed", del("a", "", false), nil},
		{"txn without put allowed", txn(nil, ops(del("zz", "", false)), nil), nil},
		{"compaction allowed", compact(2), nil},
		{"deactivate", deactivate, nil},
		{"put allowed again", put("b", "1"), nil},
		{"corrupt", activate(pb.AlarmType_CORRUPT), nil},
		{"corrupt refuses delete", del("b", "", false), rpctypes.ErrGRPCCorrupt},
	}
	for _, tc := range tests {
		if res := ts.apply(tc.req); res.Err != tc.want {
			t.Errorf("%s: err %v, want %v", tc.name, res.Err, tc.want)
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	ts := openTestStore(t, Config{})
	for i := range 20 {
		ts.apply(put(fmt.Sprintf("k%d", i), "v"))
	}
	want, _ := ts.Hash(0)
	var buf bytes.Buffer
	var info SnapshotInfo
	if err := ts.WriteSnapshot(&buf, func(i SnapshotInfo) error { info = i; return nil }); err != nil {
		t.Fatal(err)
	}
	if info.AppliedIndex != 20 || info.Revision != 21 || info.Size != int64(buf.Len()) {
		t.Fatalf("snapshot info %+v, size %d", info, buf.Len())
	}
	path := filepath.Join(t.TempDir(), "restored.db")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	restored := openTestStore(t, Config{Path: path})
	got, _ := restored.Hash(0)
	if got.Hash != want.Hash || restored.Position().AppliedIndex != 20 {
		t.Fatalf("restored hash %d index %d, want %d index 20", got.Hash, restored.Position().AppliedIndex, want.Hash)
	}
}

// TestCommitterWakesForEachChange checks that the committer, which sleeps while the store is idle, makes every
// applied entry durable within BatchInterval on its own, for a change after idle spells too.
func TestCommitterWakesForEachChange(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries int // applied in a row before waiting
	}{
		{"one entry", 1},
		{"a burst", 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := openTestStore(t, Config{BatchInterval: 20 * time.Millisecond, BatchLimit: 1 << 20})
			for round := range 3 {
				for i := range tc.entries {
					ts.apply(put(fmt.Sprintf("k%d-%d", round, i), "v"))
				}
				waittest.Until(t, 10*time.Second, 5*time.Millisecond, fmt.Sprintf("round %d durable at index %d", round, ts.index),
					func() bool { return ts.Position().DurableIndex == ts.index })
			}
		})
	}
}
