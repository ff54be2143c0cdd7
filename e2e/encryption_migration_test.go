package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/seal/kmsplugin/kmsplugintest"
	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// TestEncryptionMigrationOnCairnUp moves a live cluster under a write loop from plain values (identity) to
// aesgcm, then to a KMS plugin key, each time by a rolling restart of the storages and watchhubs on the new
// file (kill -9: cairn up starts them again reading it) and `cairn encryption rewrap`; then kills the KMS
// plugins with kill -9 under the same load. No acknowledged write is lost, every value reads back, the members'
// HashKV agree, and status shows every key's latest value under the KMS key.
func TestEncryptionMigrationOnCairnUp(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	kmsBinary, keyFile := kmsplugintest.Build(t)

	config := filepath.Join(t.TempDir(), "encryption.yaml")
	writeEncryptionConfig(t, config, "  - identity: {}\n")
	s := startUp(t, t.TempDir(), "--encryption-config", config)
	c := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	acked := &ackedWrites{values: map[string]string{}}
	stop := make(chan struct{})
	writers := writeLoop(c, "/mig/", 6, 100000, stop, acked)
	stopWriters := sync.OnceFunc(func() { close(stop); writers.Wait() })
	defer stopWriters()
	waitAcked := func(more int64, what string) {
		t.Helper()
		from := acked.count.Load()
		waittest.Until(t, 2*time.Minute, 50*time.Millisecond, what, func() bool { return acked.count.Load() >= from+more })
	}
	waitAcked(200, "200 plain writes")

	aesgcm := aesgcmProvider("key1")
	steps := []struct {
		name, providers, want string
	}{
		{"identity to aesgcm", aesgcm + "  - identity: {}\n", "aesgcm"},
		{"aesgcm to a KMS plugin key", kmsplugintest.Provider(kmsBinary, keyFile) + aesgcm + "  - identity: {}\n", "local-kms"},
	}
	for _, step := range steps {
		writeEncryptionConfig(t, config, step.providers)
		for _, child := range []string{"storage-1", "storage-2", "storage-3", "watchhub-1", "watchhub-2"} {
			s.restartChild(t, child)
			waitAcked(50, "50 writes after restarting "+child)
		}
		out := mustRunCairn(t, "encryption", "rewrap", "--endpoints", strings.Join(s.endpoints, ","), "--encryption-config", config)
		t.Logf("%s: %s", step.name, lastLine(out))
		waitAcked(100, "100 writes after the rewrap")
		status := mustRunCairn(t, "encryption", "status", "--endpoints", strings.Join(s.endpoints, ","), "--encryption-config", config)
		t.Logf("%s: status\n%s", step.name, status)
		for _, line := range strings.Split(strings.TrimSpace(status), "\n")[1:] {
			fields := strings.Fields(line)
			if fields[0] != step.want && latestColumn(t, fields) != 0 {
				t.Errorf("%s: after rewrap, keys' latest values still under %s: %s", step.name, fields[0], line)
			}
		}
	}

	// A rotation inside the KMS: the storages wrap new data keys under v2 within seconds; rewrap moves the rest.
	runCmd(t, kmsBinary, "rotate", "--key-file", keyFile)
	waittest.Until(t, time.Minute, time.Second, "every key's latest value under KMS key v2 after rotate and rewrap", func() bool {
		mustRunCairn(t, "encryption", "rewrap", "--endpoints", strings.Join(s.endpoints, ","), "--encryption-config", config)
		status := mustRunCairn(t, "encryption", "status", "--endpoints", strings.Join(s.endpoints, ","), "--encryption-config", config)
		for _, line := range strings.Split(strings.TrimSpace(status), "\n")[1:] {
			if fields := strings.Fields(line); (fields[0] != "local-kms" || fields[1] != "v2") && latestColumn(t, fields) != 0 {
				return false
			}
		}
		t.Logf("after the KMS rotation:\n%s", status)
		return true
	})

	// kill -9 of every KMS plugin under the write loop. Data keys are cached, so the load does not need the
	// plugins until a storage restarts with an empty cache: its start unwraps through a plugin started again.
	for round := range 2 {
		pids := processesOf(t, kmsBinary)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Logf("round %d: killed KMS plugins %v", round, pids)
		waitAcked(300, "300 writes after killing the KMS plugins")
		s.restartChild(t, fmt.Sprintf("storage-%d", round+1))
		waitAcked(100, "100 writes after a storage restarted with its plugin killed")
		got, err := c.Get(ctx, "/mig/", clientv3.WithPrefix())
		if err != nil {
			t.Fatalf("reading every value after killing the plugins: %v", err)
		}
		t.Logf("round %d: %d values read back; KMS plugins now %v", round, len(got.Kvs), processesOf(t, kmsBinary))
	}
	stopWriters()
	t.Logf("%d writes acknowledged, %d failed (refused while a storage restarted)", acked.count.Load(), acked.failed.Load())
	checkAcknowledged(t, ctx, c, "/mig/", acked)
	checkHashesAgree(t, ctx, s, c, etcdctl)

	// Removing aesgcm and identity while old revisions still use them: status names them missing (a storage
	// would refuse to start on that file).
	kmsOnly := filepath.Join(t.TempDir(), "kms-only.yaml")
	writeEncryptionConfig(t, kmsOnly, steps[1].providers[:strings.Index(steps[1].providers, "  - aesgcm")])
	if status := mustRunCairn(t, "encryption", "status", "--endpoints", s.endpoints[0], "--encryption-config", kmsOnly); !strings.Contains(status, "MISSING") {
		t.Errorf("status with aesgcm removed does not say MISSING:\n%s", status)
	}
}

// restartChild kills a child of cairn up with kill -9 and waits until its next process is ready.
func (s *upStack) restartChild(t *testing.T, name string) {
	t.Helper()
	before := s.child(t, name)
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %s (%d): %v", name, before.PID, err)
	}
	waittest.Until(t, time.Minute, 100*time.Millisecond, name+" restarted and ready", func() bool {
		now := s.child(t, name)
		return now.PID != 0 && now.PID != before.PID && now.Ready && now.State == supervisor.StateRunning
	})
}

// processesOf lists the pids of processes running binary (found by /proc/PID/exe).
func processesOf(t *testing.T, binary string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == binary {
			pids = append(pids, pid)
		}
	}
	return pids
}

func runCmd(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func lastLine(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	return lines[len(lines)-1]
}

// latestColumn is the LATEST PER KEY column of a status line (PROVIDER KEY VALUES LATEST STATE...); a status
// line of identity has no KEY, so its columns shift by one.
func latestColumn(t *testing.T, fields []string) int {
	t.Helper()
	for i := 1; i+1 < len(fields); i++ {
		if _, err := strconv.Atoi(fields[i]); err == nil {
			latest, err := strconv.Atoi(fields[i+1])
			if err == nil {
				return latest
			}
		}
	}
	t.Fatalf("no LATEST column in %q", fields)
	return 0
}
