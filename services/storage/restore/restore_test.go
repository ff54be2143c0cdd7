package restore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/services/consensus/wal"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// source is a snapshot file and what a store restored from it must hold.
type source struct {
	path       string
	kvs        *pb.RangeResponse // every key at the latest revision
	leases     []int64
	revision   int64
	compactRev int64
	// authRevision is the auth store's revision (auth enabled, user root, role reader).
	authRevision uint64
}

// writeCairnDB builds a Cairn database at path by applying writes, deletes, a lease and a compaction.
func writeCairnDB(t *testing.T, path string) source {
	t.Helper()
	st, err := mvcc.Open(mvcc.Config{Path: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*pb.InternalRaftRequest{
		{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}},
		{Put: &pb.PutRequest{Key: []byte("b"), Value: []byte("2")}},
		{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("3")}},
		{LeaseGrant: &pb.LeaseGrantRequest{ID: 7, TTL: 100}},
		{Put: &pb.PutRequest{Key: []byte("c"), Value: []byte("4"), Lease: 7}},
		{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("b")}},
		{Put: &pb.PutRequest{Key: []byte("d"), Value: []byte("5")}},
		{Compaction: &pb.CompactionRequest{Revision: 3}},
		// An auth store, as etcd and Cairn keep it: it must come back as it was.
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "root", HashedPassword: base64.StdEncoding.EncodeToString([]byte("root-hash"))}},
		{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}},
		{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "reader"}},
		{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "reader",
			Perm: &authpb.Permission{Key: []byte("a"), RangeEnd: []byte("b")}}},
		{AuthEnable: &pb.AuthEnableRequest{}},
	}
	for i, req := range reqs {
		if _, err := st.Apply(uint64(100+i), 3, req); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	kvs, err := st.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatal(err)
	}
	pos := st.Position()
	auth := st.Auth()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return source{path: path, kvs: kvs, leases: []int64{7}, revision: pos.Revision, compactRev: pos.CompactRev,
		authRevision: auth.Revision}
}

// toEtcdLayout rewrites a Cairn database as etcd v3.7 lays its file out: compact revisions under etcd's meta
// keys, no Cairn meta keys, membership and auth buckets.
func toEtcdLayout(t *testing.T, path string, compactRev int64, storageVersion string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		for _, k := range []string{"current_revision", "scheduled_compact_revision", "finished_compact_revision", "cairn_format_version"} {
			if err := meta.Delete([]byte(k)); err != nil {
				return err
			}
		}
		rev := make([]byte, 17)
		rev[7], rev[8] = byte(compactRev), '_'
		if err := meta.Delete([]byte("storageVersion")); err != nil {
			return err
		}
		pairs := [][2][]byte{{[]byte("scheduledCompactRev"), rev}, {[]byte("finishedCompactRev"), rev}}
		if storageVersion != "" { // etcd v3.5 writes none, nor a confState
			pairs = append(pairs, [2][]byte{[]byte("storageVersion"), []byte(storageVersion)},
				[2][]byte{[]byte("confState"), []byte(`{"voters":[1]}`)})
		}
		for _, kv := range pairs {
			if err := meta.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		for _, name := range []string{"members", "members_removed", "cluster"} {
			b, err := tx.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			if err := b.Put([]byte("x"), []byte("y")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// withTrailer writes db followed by its SHA-256 to a snapshot file, as etcdctl snapshot save does.
func withTrailer(t *testing.T, db []byte) string {
	t.Helper()
	sum := sha256.Sum256(db)
	path := filepath.Join(t.TempDir(), "snapshot.db")
	if err := os.WriteFile(path, append(db, sum[:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func snapshotOf(t *testing.T, etcdLayout bool) source {
	return snapshotOfVersion(t, etcdLayout, "3.7.0")
}

func snapshotOfVersion(t *testing.T, etcdLayout bool, storageVersion string) source {
	t.Helper()
	dbPath := filepath.Join(t.TempDir(), "source.db")
	src := writeCairnDB(t, dbPath)
	if etcdLayout {
		toEtcdLayout(t, dbPath, src.compactRev, storageVersion)
	}
	db, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	src.path = withTrailer(t, db)
	return src
}

func oneMember(snapshot, dataDir string) Config {
	return Config{SnapshotPath: snapshot, DataDir: dataDir, Name: "m1",
		InitialCluster: "m1=http://127.0.0.1:2380,m2=http://127.0.0.1:2381", InitialClusterToken: "t",
		PeerURLs: []string{"http://127.0.0.1:2380"}, Logger: slog.New(slog.DiscardHandler)}
}

func TestRestoreKeepsKeysLeasesAndCompaction(t *testing.T) {
	for _, tc := range []struct {
		name       string
		etcdLayout bool
		version    string // the etcd snapshot's storage version
		bump       uint64
	}{
		{name: "cairn snapshot"},
		{name: "etcd v3.7 snapshot", etcdLayout: true, version: "3.7.0"},
		{name: "etcd v3.6 snapshot", etcdLayout: true, version: "3.6.0"},
		{name: "etcd v3.5 snapshot", etcdLayout: true},
		{name: "cairn snapshot, bumped and compacted", bump: 1000},
		{name: "etcd snapshot, bumped and compacted", etcdLayout: true, version: "3.7.0", bump: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := snapshotOfVersion(t, tc.etcdLayout, tc.version)
			dataDir := filepath.Join(t.TempDir(), "m1")
			// A restore killed earlier left its temporary dir: this one removes it and starts over.
			if err := os.MkdirAll(filepath.Join(tempDir(dataDir), "storage"), 0o700); err != nil {
				t.Fatal(err)
			}
			cfg := oneMember(src.path, dataDir)
			cfg.BumpRevision, cfg.MarkCompacted = tc.bump, tc.bump > 0
			var final Progress
			cfg.Progress = func(p Progress) { final = p }
			m, err := Restore(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			wantLayout := map[bool]string{false: "cairn", true: "etcd"}[tc.etcdLayout]
			if m.Layout != wantLayout || !final.Done || final.KeyRevisions < 5 {
				t.Errorf("manifest %+v, last progress %+v", m, final)
			}
			if !wal.Exists(filepath.Join(dataDir, "consensus", "wal")) {
				t.Fatal("no WAL in the restored consensus dir")
			}
			if _, err := os.Stat(tempDir(dataDir)); !os.IsNotExist(err) {
				t.Errorf("temporary dir still there after the restore: %v", err)
			}
			st, err := mvcc.Open(mvcc.Config{Path: filepath.Join(dataDir, "storage", "storage.db"), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			pos := st.Position()
			wantRev, wantCompact := src.revision, src.compactRev
			if tc.bump > 0 {
				wantRev = src.revision + int64(tc.bump)
				wantCompact = wantRev
			}
			if pos.AppliedIndex != 2 || pos.AppliedTerm != 1 || pos.Revision != wantRev || pos.CompactRev != wantCompact {
				t.Errorf("position %+v, want applied index 2 (two members), term 1, revision %d, compact %d",
					pos, wantRev, wantCompact)
			}
			got, err := st.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Kvs) != len(src.kvs.Kvs) {
				t.Fatalf("restored %d keys, want %d", len(got.Kvs), len(src.kvs.Kvs))
			}
			for i := range got.Kvs {
				if !proto.Equal(got.Kvs[i], src.kvs.Kvs[i]) {
					t.Errorf("key %d: restored %v, want %v", i, got.Kvs[i], src.kvs.Kvs[i])
				}
			}
			leases, err := st.LeaseLeases()
			if err != nil || len(leases.Leases) != 1 || leases.Leases[0].ID != 7 {
				t.Errorf("leases %v %v, want lease 7", leases, err)
			}
			auth := st.Auth()
			if !auth.Enabled || auth.Revision != src.authRevision || auth.Users["root"] == nil ||
				string(auth.Users["root"].Password) != "root-hash" || auth.Roles["reader"] == nil ||
				len(auth.Roles["reader"].KeyPermission) != 1 {
				t.Errorf("restored auth store: enabled %v, revision %d (want %d), users %v, roles %v",
					auth.Enabled, auth.Revision, src.authRevision, auth.Users, auth.Roles)
			}
		})
	}
}

func TestRestoreRefusesBadInput(t *testing.T) {
	good := snapshotOf(t, false)
	raw, err := os.ReadFile(good.path)
	if err != nil {
		t.Fatal(err)
	}
	db := raw[:len(raw)-sha256.Size]
	write := func(t *testing.T, data []byte) string {
		path := filepath.Join(t.TempDir(), "bad.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newerLayout := func(t *testing.T) []byte {
		path := write(t, db)
		bdb, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = bdb.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket([]byte("quota_v9"))
			return err
		})
		_ = bdb.Close()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(path)
		sum := sha256.Sum256(data)
		return append(data, sum[:]...)
	}
	flipped := append([]byte(nil), raw...)
	flipped[len(db)/2] ^= 0x40
	notBolt := make([]byte, 4096)
	copy(notBolt, "this is not a bbolt file")
	sum := sha256.Sum256(notBolt)
	for _, tc := range []struct {
		name     string
		data     func(t *testing.T) []byte
		skipHash bool
		occupied bool
		want     error
	}{
		{name: "empty file", data: func(*testing.T) []byte { return nil }, want: ErrHash},
		{name: "empty file, hash check skipped", data: func(*testing.T) []byte { return nil }, skipHash: true, want: ErrNotSnapshot},
		{name: "truncated", data: func(*testing.T) []byte { return raw[:len(raw)-4096] }, want: ErrHash},
		{name: "flipped byte", data: func(*testing.T) []byte { return flipped }, want: ErrHash},
		{name: "not bbolt", data: func(*testing.T) []byte { return append(notBolt, sum[:]...) }, want: ErrNotSnapshot},
		{name: "newer layout", data: newerLayout, want: mvcc.ErrUnknownLayout},
		{name: "data dir not empty", data: func(*testing.T) []byte { return raw }, occupied: true, want: ErrDataDirInUse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "m1")
			if tc.occupied {
				if err := os.MkdirAll(filepath.Join(dataDir, "storage"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			cfg := oneMember(write(t, tc.data(t)), dataDir)
			cfg.SkipHashCheck = tc.skipHash
			_, err := Restore(context.Background(), cfg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("restore: %v, want %v", err, tc.want)
			}
			t.Logf("refused: %v", err)
			if _, err := os.Stat(tempDir(dataDir)); !os.IsNotExist(err) {
				t.Errorf("temporary dir left behind: %v", err)
			}
			entries, _ := os.ReadDir(dataDir)
			if wantEntries := map[bool]int{false: 0, true: 1}[tc.occupied]; len(entries) != wantEntries {
				t.Errorf("data dir holds %d entries after a refused restore, want %d", len(entries), wantEntries)
			}
		})
	}
}

func TestRestoreChecksFlagsAsEtcdutl(t *testing.T) {
	src := snapshotOf(t, false)
	for _, tc := range []struct {
		name   string
		modify func(*Config)
	}{
		{"bump without mark-compacted", func(c *Config) { c.BumpRevision = 5 }},
		{"mark-compacted without bump", func(c *Config) { c.MarkCompacted = true }},
		{"name not in initial cluster", func(c *Config) { c.Name = "m9" }},
		{"peer URLs not the member's", func(c *Config) { c.PeerURLs = []string{"http://127.0.0.1:9999"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := oneMember(src.path, filepath.Join(t.TempDir(), "m1"))
			tc.modify(&cfg)
			if _, err := Restore(context.Background(), cfg); !errors.Is(err, ErrBadFlags) {
				t.Fatalf("restore: %v, want ErrBadFlags", err)
			}
		})
	}
}

func TestStatusReadsBothLayouts(t *testing.T) {
	for _, etcdLayout := range []bool{false, true} {
		src := snapshotOf(t, etcdLayout)
		st, err := ReadStatus(src.path)
		if err != nil {
			t.Fatal(err)
		}
		// a, c, d live (b deleted); revision is the newest key revision; etcd's layout here says 3.7.0.
		wantVersion := map[bool]string{false: mvcc.StorageVersion, true: "3.7.0"}[etcdLayout]
		if st.TotalKey != 3 || st.Revision != src.revision || st.Version != wantVersion || st.Hash == 0 {
			t.Errorf("etcd layout %v: status %+v, want 3 keys at revision %d, version %s", etcdLayout, st, src.revision, wantVersion)
		}
	}
	if _, err := ReadStatus(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("status of a missing file succeeded")
	}
}
