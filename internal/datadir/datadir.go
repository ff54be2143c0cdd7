package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gofrs/flock"
)

// Kind is what a data directory holds.
type Kind string

// The kinds Inspect recognises.
const (
	Empty     Kind = "empty"
	Member    Kind = "cairn member data dir (cairn dev or cairn snapshot restore)"
	Stack     Kind = "cairn up data dir"
	Consensus Kind = "cairn consensus data dir"
	Storage   Kind = "cairn storage data dir"
	Etcd      Kind = "etcd data dir"
	Other     Kind = "directory of other files"
)

// lockFile is the lock every process holds on its data dir.
const lockFile = ".lock"

// Inspect reports what dir holds; a missing dir is Empty.
func Inspect(dir string) (Kind, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return Empty, nil
	}
	if err != nil {
		return "", fmt.Errorf("datadir: %w", err)
	}
	exists := func(parts ...string) bool {
		_, err := os.Stat(filepath.Join(append([]string{dir}, parts...)...))
		return err == nil
	}
	switch {
	case exists("member", "wal") || exists("member", "snap", "db"):
		return Etcd, nil
	case exists("layout.json") || exists("member-1", "consensus") || exists("member-1", "storage"):
		return Stack, nil
	case exists("consensus") || exists("storage"):
		return Member, nil
	case exists("wal"):
		return Consensus, nil
	case exists("storage.db"):
		return Storage, nil
	}
	for _, e := range entries {
		if e.Name() != lockFile && !strings.HasPrefix(e.Name(), ".") {
			return Other, nil
		}
	}
	return Empty, nil
}

// ErrForeign means a data dir holds something other than the command expects.
var ErrForeign = errors.New("datadir: data dir holds something else")

// Expect fails with ErrForeign, and advice, unless dir is empty or of one of the wanted kinds.
func Expect(dir, command string, want ...Kind) error {
	kind, err := Inspect(dir)
	if err != nil || kind == Empty || kind == Other {
		return err
	}
	for _, k := range want {
		if k == kind {
			return nil
		}
	}
	advice := map[Kind]string{
		Etcd: fmt.Sprintf("to migrate it, restore a snapshot of it: `cairn snapshot restore %s --skip-hash-check "+
			"--data-dir NEW-DIR ...` (or take one with `etcdctl snapshot save` and use `--from-snapshot`)",
			filepath.Join(dir, "member", "snap", "db")),
		Stack:     "start it with `cairn up --data-dir " + dir + "`",
		Member:    "start it with `cairn dev --data-dir " + dir + "`",
		Consensus: "start it with `cairn consensus --data-dir " + dir + "`",
		Storage:   "start it with `cairn storage --data-dir " + dir + "`",
	}[kind]
	return fmt.Errorf("%w: %s is a %s, not what %s uses; %s", ErrForeign, dir, kind, command, advice)
}

// Holder is who holds a data dir's lock, as recorded in the lock file.
type Holder struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

// Lock is a held data dir lock.
type Lock struct{ fl *flock.Flock }

// ErrLocked means another live process holds the data dir.
var ErrLocked = errors.New("datadir: data dir in use")

// Acquire locks dir (created if missing) for this process, or fails at once with ErrLocked naming the holder.
func Acquire(dir, command string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("datadir: %w", err)
	}
	path := filepath.Join(dir, lockFile)
	fl := flock.New(path)
	locked, err := fl.TryLock()
	if err != nil {
		return nil, fmt.Errorf("datadir: lock %s: %w", path, err)
	}
	if !locked {
		var h Holder
		raw, _ := os.ReadFile(path)
		_ = json.Unmarshal(raw, &h)
		return nil, fmt.Errorf("%w: %s is used by %q (pid %d, since %s); stop it first, or use another data dir",
			ErrLocked, dir, h.Command, h.PID, h.Since.Format(time.RFC3339))
	}
	raw, _ := json.Marshal(Holder{PID: os.Getpid(), Command: command, Since: time.Now().UTC()})
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		_ = fl.Unlock()
		return nil, fmt.Errorf("datadir: write %s: %w", path, err)
	}
	return &Lock{fl: fl}, nil
}

// Release unlocks the data dir.
func (l *Lock) Release() error { return l.fl.Unlock() }

// SyncDir fsyncs the directory dir, which makes a file created or renamed in it durable: every rename that
// publishes a file (a snapshot, a restored data dir, a WAL segment, a backup) is followed by it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
