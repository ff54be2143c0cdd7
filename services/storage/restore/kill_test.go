package restore

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/services/consensus/wal"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// restoreChildEnv makes the test binary a restore process (for TestKillDuringRestore): it restores the snapshot
// named by the variable into the dir named by restoreChildDirEnv.
const (
	restoreChildEnv    = "CAIRN_TEST_RESTORE_SNAPSHOT"
	restoreChildDirEnv = "CAIRN_TEST_RESTORE_DIR"
)

func TestMain(m *testing.M) {
	if snapshot := os.Getenv(restoreChildEnv); snapshot != "" {
		cfg := oneMember(snapshot, os.Getenv(restoreChildDirEnv))
		if _, err := Restore(context.Background(), cfg); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestKillDuringRestore kills restores at moments spread over their run: each leaves either no data dir or a
// complete one that opens at the snapshot's revision, and a restore run again afterwards succeeds.
func TestKillDuringRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 48 MiB snapshot")
	}
	snapshot := filepath.Join(t.TempDir(), "snapshot.db")
	keys := writeKubernetesSnapshot(t, snapshot, 48<<20)
	began := time.Now()
	if _, err := Restore(context.Background(), oneMember(snapshot, filepath.Join(t.TempDir(), "timing"))); err != nil {
		t.Fatal(err)
	}
	whole := time.Since(began)
	complete := 0
	for step := range 8 {
		dataDir := filepath.Join(t.TempDir(), "m1")
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), restoreChildEnv+"="+snapshot, restoreChildDirEnv+"="+dataDir)
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(whole * time.Duration(step) / 3) // from before the start to after the end
		_ = child.Process.Signal(syscall.SIGKILL)
		_ = child.Wait()
		if _, err := os.Stat(dataDir); err == nil {
			complete++
			checkRestored(t, dataDir, keys)
			continue
		}
		if _, err := Restore(context.Background(), oneMember(snapshot, dataDir)); err != nil {
			t.Fatalf("restore after a kill at %d/3 of a restore: %v", step, err)
		}
		checkRestored(t, dataDir, keys)
	}
	t.Logf("a restore takes %s; %d of 8 killed restores had finished", whole, complete)
}

// checkRestored checks that dataDir is a whole restored member: manifest, WAL, and a database at the revision.
func checkRestored(t *testing.T, dataDir string, revision int64) {
	t.Helper()
	if _, err := ReadManifest(dataDir); err != nil {
		t.Fatalf("data dir without its manifest: %v", err)
	}
	if !wal.Exists(filepath.Join(dataDir, "consensus", "wal")) {
		t.Fatal("data dir without its WAL")
	}
	st, err := mvcc.Open(mvcc.Config{Path: filepath.Join(dataDir, "storage", "storage.db"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if pos := st.Position(); pos.Revision != revision || pos.AppliedIndex != 2 {
		t.Fatalf("restored store at %+v, want revision %d, applied index 2", pos, revision)
	}
}
