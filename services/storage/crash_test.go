package storage

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/commitlog/commitlogtest"
)

// TestKill9KeepsAcknowledgedWrites runs a storage on a file-backed log in a child process that writes from 16
// goroutines, prints each acknowledged key, and kill -9s itself mid-stream. Restarted on the same data dir and
// log, the storage must hold every acknowledged key and hash exactly like a storage that applied the log once.
func TestKill9KeepsAcknowledgedWrites(t *testing.T) {
	if dir := os.Getenv("CAIRN_KILL9_DIR"); dir != "" {
		kill9Child(t, dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9KeepsAcknowledgedWrites$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CAIRN_KILL9_DIR="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v\n%s", err, out.String())
	}
	var acked []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if key, ok := strings.CutPrefix(sc.Text(), "ACK "); ok {
			acked = append(acked, key)
		}
	}
	if len(acked) < 100 {
		t.Fatalf("child acknowledged only %d writes:\n%s", len(acked), out.String())
	}
	log, err := commitlogtest.Open(commitlogtest.Config{MemberID: 1, Path: filepath.Join(dir, "log")})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, 1)
	cfg.DataDir = filepath.Join(dir, "storage")
	restarted := startMember(t, cfg, log, nil)
	reference := startMember(t, testConfig(t, 2), log, nil) // applies the same log from scratch, no crash
	ctx := ctxT(t)
	last, _ := log.ReadIndex(ctx)
	for _, m := range []*testMember{restarted, reference} {
		if err := m.waitApplied(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range acked {
		got, err := restarted.client.Range(ctx, &pb.RangeRequest{Key: []byte(key), CountOnly: true})
		if err != nil || got.Count != 1 {
			t.Fatalf("acknowledged key %s lost after kill -9: %v %v", key, got, err)
		}
	}
	h1, _ := restarted.client.Hash(ctx, 0)
	h2, _ := reference.client.Hash(ctx, 0)
	if h1.Hash != h2.Hash || h1.HashRevision != h2.HashRevision {
		t.Fatalf("restarted hash %+v != reference %+v", h1, h2)
	}
}

func kill9Child(t *testing.T, dir string) {
	log, err := commitlogtest.Open(commitlogtest.Config{MemberID: 1, Path: filepath.Join(dir, "log")})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, 1)
	cfg.DataDir, cfg.BatchLimit = filepath.Join(dir, "storage"), 64
	m := startMember(t, cfg, log, nil)
	var mu sync.Mutex
	acks := 0
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := fmt.Sprintf("w%02d/%05d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := m.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(key), Value: []byte("v")}})
				cancel()
				if err != nil {
					continue
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "ACK %s\n", key)
				acks++
				if acks == 700 {
					_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}
