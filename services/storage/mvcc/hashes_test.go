package mvcc_test

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/services/storage/mvcc"
	"github.com/cairn-kv/cairn/services/storage/mvcc/mvcctest"
)

// hashLog writes six keys over and over, deletes one, compacts at 20, writes more and compacts at 40.
func hashLog() []*pb.InternalRaftRequest {
	var log []*pb.InternalRaftRequest
	for i := range 30 {
		log = append(log, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i%6), Value: fmt.Appendf(nil, "v%d", i)}})
	}
	log = append(log, &pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("k3")}},
		&pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: 20}})
	for i := range 15 {
		log = append(log, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i%4), Value: fmt.Appendf(nil, "w%d", i)}})
	}
	return append(log, &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: 40}})
}

// applyAll applies log from index 1 on and waits for every compaction's removal to finish.
func applyAll(t *testing.T, st *mvcc.Store, log []*pb.InternalRaftRequest, from uint64) {
	t.Helper()
	for i, req := range log {
		res, err := st.Apply(from+uint64(i), 1, req)
		if err != nil || res.Err != nil {
			t.Fatalf("apply %v: %v %v", req, res, err)
		}
		if res.Compacted != nil {
			select {
			case <-res.Compacted:
			case <-time.After(10 * time.Second):
				t.Fatalf("compaction at %d did not finish", req.Compaction.Revision)
			}
		}
	}
}

func openStore(t *testing.T, path string, cfg mvcc.Config) *mvcc.Store {
	t.Helper()
	cfg.Path, cfg.Logger = path, slog.New(slog.DiscardHandler)
	st, err := mvcc.Open(cfg)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestCompactHashes checks the hashes compactions record (etcd's CompactHashCheck compares them across members):
// replicas that commit and remove on different schedules record the same ones, a replica with a changed stored
// value records a different one, and HashKV at a recorded revision answers the recorded hash.
func TestCompactHashes(t *testing.T) {
	t.Parallel()
	log := hashLog()
	reference := openStore(t, filepath.Join(t.TempDir(), "storage.db"), mvcc.Config{})
	applyAll(t, reference, log, 1)
	want := reference.CompactHashes()
	if len(want) != 2 || want[0].Revision != 40 || want[0].CompactRevision != 20 || want[1].Revision != 20 ||
		want[1].CompactRevision != 0 {
		t.Fatalf("recorded %+v, want the compactions at 40 (after 20) and 20 (after 0)", want)
	}
	kv, err := reference.Hash(40)
	if err != nil || kv.Hash != want[0].Hash || kv.CompactRevision != 20 || kv.HashRevision != 40 {
		t.Fatalf("Hash(40) = %v, %v; want the recorded %+v", kv, err, want[0])
	}

	tests := []struct {
		name string
		cfg  mvcc.Config
		// tamper, when set, changes k1's stored value after the first 12 entries (the store closed meanwhile).
		tamper   bool
		wantSame bool
	}{
		{name: "commit per entry, one revision per removal batch", cfg: mvcc.Config{BatchLimit: 1, CompactionBatchLimit: 1}, wantSame: true},
		{name: "large batches", cfg: mvcc.Config{BatchLimit: 1000, CompactionBatchLimit: 100000}, wantSame: true},
		{name: "value changed on disk", cfg: mvcc.Config{}, tamper: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "storage.db")
			st := openStore(t, path, tc.cfg)
			applyAll(t, st, log[:12], 1)
			if tc.tamper {
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				if _, err := mvcctest.TamperValue(path, []byte("k1"), []byte("evil")); err != nil {
					t.Fatal(err)
				}
				st = openStore(t, path, tc.cfg)
			}
			applyAll(t, st, log[12:], 13)
			got := st.CompactHashes()
			if len(got) != len(want) {
				t.Fatalf("recorded %+v, want %+v", got, want)
			}
			same := got[0] == want[0] && got[1] == want[1]
			if same != tc.wantSame {
				t.Fatalf("recorded %+v, reference %+v: same %v, want %v", got, want, same, tc.wantSame)
			}
		})
	}
}

// TestCompactHashNotRecordedOnResume: a compaction that a restart interrupted may have removed revisions
// already, so when it resumes its hash is not recorded (as etcd).
func TestCompactHashNotRecordedOnResume(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "storage.db")
	// A long pause between single-revision batches keeps the compaction running while the store closes.
	cfg := mvcc.Config{CompactionBatchLimit: 1, CompactionSleepInterval: time.Hour}
	st := openStore(t, path, cfg)
	log := hashLog()[:32] // up to the compaction at 20
	for i, req := range log {
		if _, err := st.Apply(uint64(i+1), 1, req); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openStore(t, path, mvcc.Config{})
	// A compaction applied after the restart waits for the resumed one; only its own hash is recorded.
	applyAll(t, st, []*pb.InternalRaftRequest{{Compaction: &pb.CompactionRequest{Revision: 30}}}, uint64(len(log)+1))
	got := st.CompactHashes()
	if len(got) != 1 || got[0].Revision != 30 || got[0].CompactRevision != 20 {
		t.Fatalf("recorded %+v, want only the compaction at 30 (after 20)", got)
	}
}
