//go:build linux

package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestFullDisk runs a storage in a child process whose file size limit (RLIMIT_FSIZE) stops the bbolt file from
// growing, as a full disk would: commits fail. Storage must turn unhealthy, refuse requests, and once the limit is
// lifted recover from the log with every acknowledged write intact.
func TestFullDisk(t *testing.T) {
	if os.Getenv("CAIRN_FULLDISK_CHILD") != "" {
		fullDiskChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFullDisk$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "CAIRN_FULLDISK_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestFullDisk") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func fullDiskChild(t *testing.T) {
	signal.Ignore(syscall.SIGXFSZ) // a write past the limit then fails with EFBIG instead of killing us
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	ctx := ctxT(t)
	value := []byte(strings.Repeat("v", 32*1024))
	put := func(key string) error {
		_, err := m.client.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: value})
		return err
	}
	if err := put("before"); err != nil {
		t.Fatal(err)
	}
	if err := m.currentStore().Commit(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(m.cfg.DataDir, dbFileName))
	if err != nil {
		t.Fatal(err)
	}
	var saved syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &saved); err != nil {
		t.Fatal(err)
	}
	full := syscall.Rlimit{Cur: uint64(fi.Size()), Max: saved.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &full); err != nil {
		t.Fatal(err)
	}
	var acked []string
	var refused error
	for i := 0; i < 5000 && refused == nil; i++ {
		key := fmt.Sprintf("k%05d", i)
		if refused = put(key); refused == nil {
			acked = append(acked, key)
		}
	}
	if refused == nil {
		t.Fatalf("5000 puts of 32 KiB fitted under a file size limit of %d bytes", fi.Size())
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "storage to report the failure", func() bool {
		return m.Health(ctx) != nil
	})
	if err := m.Health(ctx); !strings.Contains(err.Error(), "file too large") {
		t.Fatalf("health while full: %v, want the commit failure", err)
	}
	code, body := httpGet(t, "http://"+m.AdminAddr()+"/health")
	if code != 503 || !strings.Contains(body, "recovering") {
		t.Fatalf("/health while full = %d %s", code, body)
	}
	_, err = m.client.Range(ctx, &pb.RangeRequest{Key: []byte("before"), Serializable: true})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("read while full: %v, want Unavailable", err)
	}
	if err := put("while-full"); status.Code(err) != codes.Unavailable && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write while full: %v, want Unavailable", err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &saved); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, "storage to recover", func() bool {
		return m.Health(ctx) == nil
	})
	for _, key := range append(acked, "before") {
		got, err := m.client.Range(ctx, &pb.RangeRequest{Key: []byte(key), KeysOnly: true})
		if err != nil || len(got.Kvs) != 1 {
			t.Fatalf("acknowledged %s lost after recovery: %v %v", key, got, err)
		}
	}
	if err := put("after"); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
	t.Logf("%d writes acknowledged before the disk filled (%v), all present after recovery", len(acked), refused)
}
