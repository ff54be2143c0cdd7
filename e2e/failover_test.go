package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ackedWrites records the writes the cluster acknowledged.
type ackedWrites struct {
	mu     sync.Mutex
	values map[string]string
	count  atomic.Int64
	failed atomic.Int64
}

// writeLoop puts unique keys from writers goroutines until stop closes or each has written maxPerWriter.
func writeLoop(c *clientv3.Client, writers, maxPerWriter int, stop <-chan struct{}, acked *ackedWrites) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range maxPerWriter {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("crash/w%02d/%06d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := c.Put(ctx, key, "v-"+key)
				cancel()
				if err != nil {
					acked.failed.Add(1)
					continue
				}
				acked.mu.Lock()
				acked.values[key] = "v-" + key
				acked.mu.Unlock()
				acked.count.Add(1)
			}
		})
	}
	return &wg
}

func testLeaderCrash(t *testing.T, s *upStack, etcdctl string) {
	c := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leaderChild, leaderID := s.leaderConsensus(t, ctx, c)
	before := s.child(t, leaderChild)
	t.Logf("leader is %x, process %s pid %d", leaderID, leaderChild, before.PID)

	acked := &ackedWrites{values: map[string]string{}}
	stop := make(chan struct{})
	writers := writeLoop(c, 8, 20000, stop, acked)
	defer func() { close(stop); writers.Wait() }()

	waitFor(t, time.Minute, "300 acknowledged writes before the crash", func() bool { return acked.count.Load() >= 300 })
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", before.PID, err)
	}
	atKill := acked.count.Load()
	killedAt := time.Now()
	waitFor(t, time.Minute, "300 more acknowledged writes after the crash", func() bool { return acked.count.Load() >= atKill+300 })
	t.Logf("writes went on %s after the kill; %d acknowledged before it, %d failed in all",
		time.Since(killedAt).Round(time.Millisecond), atKill, acked.failed.Load())
	close(stop)
	writers.Wait()
	stop = make(chan struct{})

	waitFor(t, time.Minute, leaderChild+" restarted by cairn up", func() bool {
		now := s.child(t, leaderChild)
		return now.Restarts >= before.Restarts+1 && now.PID != 0 && now.PID != before.PID &&
			strings.Contains(now.LastExit, "killed")
	})

	t.Run("every acknowledged write is readable", func(t *testing.T) {
		got, err := c.Get(ctx, "crash/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]string{}
		for _, kv := range got.Kvs {
			have[string(kv.Key)] = string(kv.Value)
		}
		acked.mu.Lock()
		defer acked.mu.Unlock()
		lost := 0
		for key, value := range acked.values {
			if have[key] != value {
				lost++
				if lost <= 5 {
					t.Errorf("acknowledged write %s = %s reads back as %q", key, value, have[key])
				}
			}
		}
		if lost > 0 {
			t.Errorf("%d of %d acknowledged writes lost", lost, len(acked.values))
		}
	})

	t.Run("every member's HashKV agrees", func(t *testing.T) {
		rev := s.currentRevision(t, ctx, c)
		var last []string
		waitFor(t, time.Minute, "equal HashKV on every member at one revision", func() bool {
			last = last[:0]
			hashes := map[uint32]bool{}
			for _, endpoint := range s.endpoints {
				resp, err := c.HashKV(ctx, endpoint, rev)
				if err != nil {
					last = append(last, fmt.Sprintf("%s: %v", endpoint, err))
					return false
				}
				last = append(last, fmt.Sprintf("%s: member %x hash %d compact %d", endpoint, resp.Header.MemberId, resp.Hash, resp.CompactRevision))
				hashes[resp.Hash] = true
			}
			return len(hashes) == 1
		})
		t.Logf("HashKV at revision %d: %v", rev, last)
		res := runEtcdctl(t, etcdctl, s.endpoints, "", "endpoint", "hashkv", "--rev", fmt.Sprint(rev), "-w", "table")
		if res.ExitCode != 0 {
			t.Errorf("etcdctl endpoint hashkv: %s%s", res.Stdout, res.Stderr)
		}
	})
}

// leaderConsensus finds the leader's member ID from an endpoint status and maps it to its consensus process.
func (s *upStack) leaderConsensus(t *testing.T, ctx context.Context, c *clientv3.Client) (string, uint64) {
	t.Helper()
	st, err := c.Status(ctx, s.endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	members, err := c.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members.Members {
		if m.ID == st.Leader {
			number, ok := strings.CutPrefix(m.Name, "member-")
			if !ok {
				t.Fatalf("leader %x has name %q, not member-N", m.ID, m.Name)
			}
			return "consensus-" + number, m.ID
		}
	}
	t.Fatalf("leader %x is not in the member list %+v", st.Leader, members.Members)
	return "", 0
}

func (s *upStack) currentRevision(t *testing.T, ctx context.Context, c *clientv3.Client) int64 {
	t.Helper()
	resp, err := c.Get(ctx, "crash/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}
