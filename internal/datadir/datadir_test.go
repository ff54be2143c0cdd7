package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInspectAndExpect(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string // paths to create; a trailing / makes a directory
		kind  Kind
		// devErr is what Expect(dir, "cairn dev", Member) must say, "" for no error.
		devErr string
	}{
		{name: "missing", kind: Empty},
		{name: "only the lock", files: []string{".lock"}, kind: Empty},
		{name: "cairn dev", files: []string{"consensus/wal/", "storage/storage.db"}, kind: Member},
		{name: "restored member", files: []string{"consensus/", "storage/", "restore.json"}, kind: Member},
		{name: "cairn up", files: []string{"layout.json", "member-1/consensus/"}, kind: Stack, devErr: "cairn up --data-dir"},
		{name: "restored cairn up members", files: []string{"member-1/storage/"}, kind: Stack, devErr: "cairn up --data-dir"},
		{name: "etcd", files: []string{"member/snap/db", "member/wal/"}, kind: Etcd, devErr: "cairn snapshot restore"},
		{name: "consensus", files: []string{"wal/"}, kind: Consensus, devErr: "cairn consensus --data-dir"},
		{name: "storage", files: []string{"storage.db"}, kind: Storage, devErr: "cairn storage --data-dir"},
		{name: "other files", files: []string{"notes.txt"}, kind: Other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			for _, f := range tc.files {
				path := filepath.Join(dir, f)
				if strings.HasSuffix(f, "/") {
					if err := os.MkdirAll(path, 0o700); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			kind, err := Inspect(dir)
			if err != nil || kind != tc.kind {
				t.Fatalf("Inspect: %q %v, want %q", kind, err, tc.kind)
			}
			err = Expect(dir, "cairn dev", Member)
			switch {
			case tc.devErr == "" && err != nil:
				t.Errorf("Expect: %v", err)
			case tc.devErr != "" && (!errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), tc.devErr)):
				t.Errorf("Expect: %v, want ErrForeign saying %q", err, tc.devErr)
			}
		})
	}
}

func TestAcquireNamesTheHolder(t *testing.T) {
	dir := t.TempDir()
	first, err := Acquire(dir, "cairn dev")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir, "cairn up")
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), `"cairn dev" (pid `) {
		t.Fatalf("second Acquire: %v, want ErrLocked naming cairn dev", err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Acquire(dir, "cairn up")
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	_ = again.Release()
}
