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

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// ackedWrites records the writes the cluster acknowledged.
type ackedWrites struct {
	mu     sync.Mutex
	values map[string]string
	count  atomic.Int64
	failed atomic.Int64
}

// writeLoop puts unique keys under prefix from writers goroutines until stop closes or each has written
// maxPerWriter.
func writeLoop(c *clientv3.Client, prefix string, writers, maxPerWriter int, stop <-chan struct{}, acked *ackedWrites) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range maxPerWriter {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("%sw%02d/%06d", prefix, w, i)
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

// crashVictim picks the process a crash test kills.
type crashVictim struct {
	name string
	pick func(t *testing.T, ctx context.Context, s *upStack, c *clientv3.Client) string
}

func crashVictims() []crashVictim {
	return []crashVictim{
		{"the leader's consensus", func(t *testing.T, ctx context.Context, s *upStack, c *clientv3.Client) string {
			child, _ := s.leaderConsensus(t, ctx, c)
			return child
		}},
		{"a follower's storage", func(t *testing.T, ctx context.Context, s *upStack, c *clientv3.Client) string {
			child, _ := s.leaderConsensus(t, ctx, c)
			number := strings.TrimPrefix(child, "consensus-")
			return "storage-" + map[string]string{"1": "2", "2": "3", "3": "1"}[number]
		}},
		{"the leader's storage", func(t *testing.T, ctx context.Context, s *upStack, c *clientv3.Client) string {
			child, _ := s.leaderConsensus(t, ctx, c)
			return "storage-" + strings.TrimPrefix(child, "consensus-")
		}},
		{"a frontend", func(*testing.T, context.Context, *upStack, *clientv3.Client) string { return "frontend-2" }},
		{"NATS", func(*testing.T, context.Context, *upStack, *clientv3.Client) string { return "nats" }},
	}
}

// testCrashesDuringWrites kills each victim with kill -9 in the middle of a write loop, and checks that the
// writes go on, the victim is restarted, every acknowledged write reads back and every member's HashKV agrees.
func testCrashesDuringWrites(t *testing.T, s *upStack, etcdctl string) {
	c := s.client(t)
	for round, victim := range crashVictims() {
		t.Run("kill -9 of "+victim.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			child := victim.pick(t, ctx, s, c)
			before := s.child(t, child)
			t.Logf("killing %s pid %d", child, before.PID)

			acked := &ackedWrites{values: map[string]string{}}
			stop := make(chan struct{})
			writers := writeLoop(c, fmt.Sprintf("crash/%d/", round), 8, 20000, stop, acked)
			stopWriters := sync.OnceFunc(func() { close(stop); writers.Wait() })
			defer stopWriters()

			waittest.Until(t, time.Minute, 100*time.Millisecond, "300 acknowledged writes before the crash", func() bool {
				return acked.count.Load() >= 300
			})
			if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
				t.Fatalf("kill -9 %d: %v", before.PID, err)
			}
			atKill, killedAt := acked.count.Load(), time.Now()
			waittest.Until(t, time.Minute, 100*time.Millisecond, "300 more acknowledged writes after the crash", func() bool {
				return acked.count.Load() >= atKill+300
			})
			t.Logf("300 more writes acknowledged %s after the kill; %d before it, %d failed in all",
				time.Since(killedAt).Round(time.Millisecond), atKill, acked.failed.Load())
			stopWriters()

			waittest.Until(t, time.Minute, 100*time.Millisecond, child+" restarted by cairn up", func() bool {
				now := s.child(t, child)
				return now.Restarts >= before.Restarts+1 && now.PID != 0 && now.PID != before.PID &&
					strings.Contains(now.LastExit, "killed")
			})
			checkAcknowledged(t, ctx, c, fmt.Sprintf("crash/%d/", round), acked)
			checkHashesAgree(t, ctx, s, c, etcdctl)
		})
	}
}

// checkAcknowledged reads every key under prefix and checks that each acknowledged write is there.
func checkAcknowledged(t *testing.T, ctx context.Context, c *clientv3.Client, prefix string, acked *ackedWrites) {
	t.Helper()
	got, err := c.Get(ctx, prefix, clientv3.WithPrefix())
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
}

// checkHashesAgree waits until every member's storage has the same HashKV at the current revision.
func checkHashesAgree(t *testing.T, ctx context.Context, s *upStack, c *clientv3.Client, etcdctl string) {
	t.Helper()
	rev := s.currentRevision(t, ctx, c)
	var last []string
	waittest.Until(t, time.Minute, 100*time.Millisecond, "equal HashKV on every member at one revision", func() bool {
		last = last[:0]
		hashes := map[uint32]bool{}
		members := map[uint64]bool{}
		for _, endpoint := range s.endpoints {
			resp, err := c.HashKV(ctx, endpoint, rev)
			if err != nil {
				last = append(last, fmt.Sprintf("%s: %v", endpoint, err))
				return false
			}
			last = append(last, fmt.Sprintf("%s: member %x hash %d", endpoint, resp.Header.MemberId, resp.Hash))
			hashes[resp.Hash] = true
			members[resp.Header.MemberId] = true
		}
		return len(hashes) == 1 && len(members) == len(s.endpoints)
	})
	t.Logf("HashKV at revision %d: %v", rev, last)
	res := s.etcdctl(t, etcdctl, s.endpoints, "", "endpoint", "hashkv", "--rev", fmt.Sprint(rev))
	if res.ExitCode != 0 || strings.Count(res.Stdout, "\n") != len(s.endpoints) {
		t.Errorf("etcdctl endpoint hashkv: %s%s", res.Stdout, res.Stderr)
	}
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
