package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/storage/mvcc/mvcctest"
)

// TestCorruptMemberOnUp flips a value inside one member's bbolt file on `cairn up` while its storage is down
// (cairn up paused, so it cannot restart it meanwhile), then lets it come back. After the next compaction the
// leader's storage finds that member's compaction hash differs from the others' and raises the CORRUPT alarm
// through the log: `etcdctl alarm list` shows it, and etcdctl's writes fail with etcd's "corrupt cluster".
func TestCorruptMemberOnUp(t *testing.T) {
	s := startUp(t, t.TempDir(), "--experimental-compact-hash-check-enabled", "--experimental-compact-hash-check-time", "500ms")
	etcdctl := etcdreftest.Etcdctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.client(t)
	for i := range 10 {
		if _, err := c.Put(ctx, fmt.Sprintf("corrupt/k%d", i%3), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	members, err := c.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var victimID uint64
	for _, m := range members.Members {
		if m.Name == "member-2" {
			victimID = m.ID
		}
	}
	// The writes must be in member-2's bbolt file, not only in its log, or the replay after the kill rewrites them.
	waittest.Until(t, 30*time.Second, 100*time.Millisecond, "storage-2 committed the writes", func() bool {
		applied, ok1 := s.metric(t, "storage-2", "etcd_server_proposals_applied_total")
		durable, ok2 := s.metric(t, "storage-2", "cairn_storage_durable_index")
		return ok1 && ok2 && applied > 0 && durable == applied
	})
	before := s.child(t, "storage-2")
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = s.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume()
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 storage-2 (%d): %v", before.PID, err)
	}
	waittest.Until(t, 10*time.Second, 20*time.Millisecond, "storage-2 gone", func() bool { return exited(before.PID) })
	db := filepath.Join(s.dir, "member-2", "storage", "storage.db")
	if _, err := mvcctest.TamperValue(db, []byte("corrupt/k1"), []byte("flipped")); err != nil {
		t.Fatal(err)
	}
	resume()
	waittest.Until(t, time.Minute, 100*time.Millisecond, "storage-2 restarted and ready", func() bool {
		now := s.child(t, "storage-2")
		return now.Restarts > before.Restarts && now.Ready
	})

	head, err := c.Get(ctx, "corrupt/k0")
	if err != nil {
		t.Fatal(err)
	}
	if r := s.etcdctl(t, etcdctl, s.endpoints, "", "compact", fmt.Sprint(head.Header.Revision)); r.ExitCode != 0 {
		t.Fatalf("etcdctl compact: %+v", r)
	}
	want := fmt.Sprintf("memberID:%d alarm:CORRUPT", victimID)
	waittest.Until(t, 30*time.Second, 200*time.Millisecond, "etcdctl alarm list showing "+want, func() bool {
		r := s.etcdctl(t, etcdctl, s.endpoints, "", "alarm", "list")
		return r.ExitCode == 0 && strings.Join(strings.Fields(r.Stdout), " ") == want // etcdctl pads with spaces
	})
	r := s.etcdctl(t, etcdctl, s.endpoints, "", "put", "corrupt/after", "v")
	if r.ExitCode == 0 || !strings.Contains(r.Stderr, "etcdserver: corrupt cluster") {
		t.Fatalf("etcdctl put with the CORRUPT alarm: %+v, want etcd's corrupt cluster error", r)
	}
	if r := s.etcdctl(t, etcdctl, s.endpoints, "", "get", "corrupt/k0"); r.ExitCode != 0 {
		t.Fatalf("etcdctl get with the CORRUPT alarm (etcd serves reads): %+v", r)
	}
}

// exited reports whether process pid has exited: gone, or a zombie its stopped parent has not reaped yet.
func exited(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")
}
