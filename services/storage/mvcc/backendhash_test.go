package mvcc

import (
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/api/storagepb"
)

func backendHash(t *testing.T, ts *testStore) *pb.HashResponse {
	t.Helper()
	h, err := ts.BackendHash()
	if err != nil {
		t.Fatalf("BackendHash: %v", err)
	}
	return h
}

// TestBackendHashFollowsData applies one more entry (or reads) after the same start and checks whether the
// whole-backend hash moved. Commits wait an hour, so every change is still uncommitted when the hash is taken:
// the hash must commit it first to see it.
func TestBackendHashFollowsData(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		act        func(t *testing.T, ts *testStore)
		wantChange bool
	}{
		{"put a new key", applied(put("new", "1")), true},
		{"put the same value again", applied(put("k1", "v1")), true},
		{"delete a key", applied(del("k2", "", false)), true},
		{"compact", applied(compact(5)), true},
		{"grant a lease", applied(grant(99, 60)), true},
		{"raise an alarm", applied(&pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{
			Action: pb.AlarmRequest_ACTIVATE, MemberID: 3, Alarm: pb.AlarmType_NOSPACE}}), true},
		{"claim the leasekeeper role", func(t *testing.T, ts *testStore) {
			ts.index++
			if res, err := ts.ApplyKeeperClaim(ts.index, 1, &storagepb.KeeperClaim{KeeperId: "lk1"}); err != nil || res.Err != nil {
				t.Fatalf("claim: %v %v", res, err)
			}
		}, true},
		{"range", func(t *testing.T, ts *testStore) {
			if resp, err := ts.Range(&pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l")}); err != nil || resp.Count != 10 {
				t.Fatalf("range: %v %v", resp, err)
			}
		}, false},
		{"read-only txn", func(t *testing.T, ts *testStore) {
			if _, err := ts.do(txn(nil, ops(get("k1", "")), nil)); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"delete of a missing key", applied(del("missing", "", false)), false},
		{"put refused for a missing lease", func(t *testing.T, ts *testStore) {
			if res := ts.apply(put("k1", "x", withLease(12345))); res.Err == nil {
				t.Fatal("put with a missing lease was not refused")
			}
		}, false},
		{"empty entry of a new term", func(t *testing.T, ts *testStore) {
			ts.index++
			if err := ts.ApplyNoop(ts.index, 7); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := openTestStore(t, Config{BatchInterval: time.Hour})
			for i := range 10 {
				ts.apply(put(fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)))
			}
			before := backendHash(t, ts)
			tc.act(t, ts)
			after := backendHash(t, ts)
			if changed := after.Hash != before.Hash; changed != tc.wantChange {
				t.Fatalf("hash %d -> %d: changed %v, want %v", before.Hash, after.Hash, changed, tc.wantChange)
			}
			if rev := ts.Position().Revision; after.Header.Revision != rev {
				t.Fatalf("header revision %d, want the store's %d", after.Header.Revision, rev)
			}
		})
	}
}

// applied is an act that applies req as the next entry.
func applied(req *pb.InternalRaftRequest) func(*testing.T, *testStore) {
	return func(t *testing.T, ts *testStore) { ts.apply(req) }
}

// TestBackendHashSameOnReplicas applies one log to replicas that differ in everything a member does on its own:
// commit batching, compaction progress, a restart, terms and extra empty entries. All must hash alike.
func TestBackendHashSameOnReplicas(t *testing.T) {
	t.Parallel()
	var log []*pb.InternalRaftRequest
	log = append(log, grant(1, 60))
	for i := range 40 {
		log = append(log, put(fmt.Sprintf("k%d", i%6), fmt.Sprint(i), withLease(int64(i%2))))
	}
	log = append(log, del("k3", "", false), compact(30))
	for i := range 10 {
		log = append(log, put(fmt.Sprintf("late%d", i), "x"))
	}
	log = append(log, &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 2,
		Alarm: pb.AlarmType_NOSPACE}})

	// applyLog applies entries at term, with an empty entry before each one when noops is set, and returns the
	// compaction's completion channel.
	applyLog := func(t *testing.T, ts *testStore, entries []*pb.InternalRaftRequest, term uint64, noops bool) <-chan struct{} {
		var compacted <-chan struct{}
		for _, req := range entries {
			if noops {
				ts.index++
				if err := ts.ApplyNoop(ts.index, term); err != nil {
					t.Fatal(err)
				}
			}
			ts.index++
			res, err := ts.Apply(ts.index, term, req)
			if err != nil || res.Err != nil {
				t.Fatalf("apply %v: %v %v", req, res, err)
			}
			if res.Compacted != nil {
				compacted = res.Compacted
			}
		}
		return compacted
	}
	reference := openTestStore(t, Config{})
	select {
	case <-applyLog(t, reference, log, 1, false):
	case <-time.After(10 * time.Second):
		t.Fatal("the reference's compaction did not finish")
	}
	want := backendHash(t, reference)

	tests := []struct {
		name    string
		replica func(t *testing.T) *testStore
	}{
		{"commits after every entry", func(t *testing.T) *testStore {
			ts := openTestStore(t, Config{BatchLimit: 1})
			applyLog(t, ts, log, 1, false)
			return ts
		}},
		{"compaction barely started", func(t *testing.T) *testStore {
			ts := openTestStore(t, Config{CompactionBatchLimit: 3, CompactionSleepInterval: time.Hour})
			applyLog(t, ts, log, 1, false)
			return ts
		}},
		{"restarted halfway", func(t *testing.T) *testStore {
			ts := openTestStore(t, Config{})
			applyLog(t, ts, log[:len(log)/2], 1, false)
			ts = reopen(t, ts)
			applyLog(t, ts, log[len(log)/2:], 1, false)
			return ts
		}},
		{"later term with empty entries between", func(t *testing.T) *testStore {
			ts := openTestStore(t, Config{})
			applyLog(t, ts, log, 4, true)
			return ts
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := backendHash(t, tc.replica(t))
			if got.Hash != want.Hash || got.Header.Revision != want.Header.Revision {
				t.Fatalf("hash %d at revision %d, want the reference's %d at %d", got.Hash, got.Header.Revision,
					want.Hash, want.Header.Revision)
			}
		})
	}
}
