package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/testing/watchtest"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// TestWatch runs the watch acceptance tests against one `cairn up` (3 members, 2 watchhubs behind the
// frontends); the crashes come last.
func TestWatch(t *testing.T) {
	s := startUp(t, t.TempDir())
	etcdctl := etcdreftest.Etcdctl(t)
	t.Run("etcdctl watch", func(t *testing.T) { testEtcdctlWatch(t, s, etcdctl) })
	t.Run("client v3 watches", func(t *testing.T) { testClientV3Watches(t, s) })
	t.Run("every revision once through kill -9", func(t *testing.T) { testWatchersThroughCrashes(t, s) })
}

// etcdctlWatch starts `etcdctl watch args...` on endpoints.
func etcdctlWatch(t *testing.T, etcdctl string, endpoints []string, args ...string) (<-chan string, func() error) {
	t.Helper()
	return etcdreftest.EtcdctlLines(t, etcdctl, time.Minute, append([]string{"--endpoints", strings.Join(endpoints, ","), "watch"}, args...)...)
}

func nextLines(t *testing.T, lines <-chan string, n int) []string {
	t.Helper()
	return etcdreftest.NextLines(t, lines, n, 30*time.Second)
}

func testEtcdctlWatch(t *testing.T, s *upStack, etcdctl string) {
	c := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, err := c.Put(ctx, "watch/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	start := first.Header.Revision
	for _, op := range []clientv3.Op{clientv3.OpPut("watch/b", "2"), clientv3.OpPut("watch/a", "3"), clientv3.OpDelete("watch/b")} {
		if _, err := c.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("--prefix --rev", func(t *testing.T) {
		lines, _ := etcdctlWatch(t, etcdctl, s.endpoints, "watch/", "--prefix", fmt.Sprintf("--rev=%d", start))
		want := []string{"PUT", "watch/a", "1", "PUT", "watch/b", "2", "PUT", "watch/a", "3", "DELETE", "watch/b"}
		if got := nextLines(t, lines, len(want)); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("etcdctl printed %q, want %q", got, want)
		}
	})
	t.Run("--prev-kv", func(t *testing.T) {
		lines, _ := etcdctlWatch(t, etcdctl, s.endpoints, "watch/a", "--prev-kv", fmt.Sprintf("--rev=%d", start+2))
		want := []string{"PUT", "watch/a", "1", "watch/a", "3"}
		if got := nextLines(t, lines, len(want)); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("etcdctl printed %q, want %q", got, want)
		}
	})
	t.Run("compacted start", func(t *testing.T) {
		resp, err := c.Put(ctx, "watch/c", "4")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
		// Each hub learns of the compaction from the bus; until then it may still serve the old revisions.
		waittest.Until(t, 30*time.Second, 100*time.Millisecond, "every hub to refuse the compacted revision", func() bool {
			for range 4 {
				wctx, wcancel := context.WithCancel(ctx)
				r := <-c.Watch(wctx, "watch/a", clientv3.WithRev(start))
				wcancel()
				if r.CompactRevision == 0 {
					return false
				}
			}
			return true
		})
		lines, wait := etcdctlWatch(t, etcdctl, s.endpoints, "watch/a", fmt.Sprintf("--rev=%d", start))
		var out []string
		for l := range lines {
			out = append(out, l)
		}
		if err := wait(); err == nil || !strings.Contains(strings.Join(out, "\n"), "required revision has been compacted") {
			t.Fatalf("etcdctl exited with %v printing %q, want the compaction error", err, out)
		}
	})
}

func testClientV3Watches(t *testing.T, s *upStack) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(t, s.endpoints[0])
	const watches = 100
	var chans []clientv3.WatchChan
	for i := range watches {
		chans = append(chans, c.Watch(ctx, fmt.Sprintf("many/%03d", i), clientv3.WithCreatedNotify()))
		if resp := <-chans[i]; !resp.Created {
			t.Fatalf("watch %d not created: %v", i, resp.Err())
		}
	}
	for i := range watches {
		if _, err := c.Put(ctx, fmt.Sprintf("many/%03d", i), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, wch := range chans {
		resp := <-wch
		if len(resp.Events) != 1 || string(resp.Events[0].Kv.Value) != fmt.Sprint(i) {
			t.Fatalf("watch %d got %+v (%v)", i, resp, resp.Err())
		}
	}
	if err := c.RequestProgress(ctx); err != nil {
		t.Fatal(err)
	}
	progress := <-chans[0]
	if !progress.IsProgressNotify() || progress.Header.Revision == 0 {
		t.Fatalf("after RequestProgress: %+v, want a progress notification", progress)
	}

	big := strings.Repeat("x", 1<<20)
	var from int64
	for i := range 3 {
		resp, err := c.Put(ctx, fmt.Sprintf("big/%d", i), big)
		if err != nil {
			t.Fatal(err)
		}
		if from == 0 {
			from = resp.Header.Revision
		}
	}
	// The bus brings the puts to a watched hub a moment after they are acknowledged: wait until every hub with
	// a watch stream has all three, so each watch below gets them in one 3 MiB catch-up response. A hub without
	// one follows nothing; the stream that wakes it waits until it has filled up to storage's revision.
	waittest.Until(t, 10*time.Second, 100*time.Millisecond, "the watched hubs to have the big puts", func() bool {
		for _, hub := range []string{"watchhub-1", "watchhub-2"} {
			streams, ok := s.metric(t, hub, "etcd_debugging_mvcc_watch_stream_total")
			if !ok {
				return false
			}
			if head, ok := s.metric(t, hub, "cairn_watchhub_head_revision"); streams > 0 && (!ok || int64(head) < from+2) {
				return false
			}
		}
		return true
	})
	small, err := clientv3.New(clientv3.Config{Endpoints: s.endpoints, DialTimeout: 5 * time.Second, MaxCallRecvMsgSize: 3 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if resp := <-small.Watch(ctx, "big/", clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithFragment()); resp.Err() != nil || len(resp.Events) != 3 {
		t.Fatalf("fragmented 3 MiB watch: %d events, %v", len(resp.Events), resp.Err())
	}
	if resp := <-small.Watch(ctx, "big/", clientv3.WithPrefix(), clientv3.WithRev(from)); resp.Err() == nil || resp.Err() == rpctypes.ErrCompacted {
		t.Fatalf("an unfragmented 3 MiB response reached a client limited to 3 MiB: %v", resp.Err())
	}
}

// testWatchersThroughCrashes: 100 watchers (10 clients over the frontends) each check that they receive every
// revision of a write stream once, in order, while a hub, a storage, NATS and the other hub are killed with
// kill -9 one after the other (cairn up restarts each).
func testWatchersThroughCrashes(t *testing.T, s *upStack) {
	writer := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	first, err := writer.Put(ctx, "crashwatch/start", "0")
	if err != nil {
		t.Fatal(err)
	}
	start := first.Header.Revision + 1
	var clients []*clientv3.Client
	for i := range 10 {
		clients = append(clients, s.client(t, s.endpoints[i%len(s.endpoints)]))
	}
	watchers := watchtest.Start(ctx, clients, 10, "crashwatch/w/", start)
	var last int64
	write := func(count int) {
		for range count {
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := writer.Put(wctx, fmt.Sprintf("crashwatch/w/%d", last), "v")
			wcancel()
			if err == nil {
				last = resp.Header.Revision
			}
		}
	}
	write(150)
	for _, victim := range []string{"watchhub-1", "storage-2", "nats", "watchhub-2"} {
		before := s.child(t, victim)
		if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 %s (%d): %v", victim, before.PID, err)
		}
		t.Logf("killed %s pid %d at revision %d", victim, before.PID, last)
		write(150)
		waittest.Until(t, time.Minute, 100*time.Millisecond, victim+" restarted and ready", func() bool {
			now := s.child(t, victim)
			return now.Restarts > before.Restarts && now.Ready
		})
	}
	write(50)
	waittest.Until(t, 2*time.Minute, 100*time.Millisecond, "every watcher at the last revision", func() bool {
		return watchers.Done(last)
	})
	if err := watchers.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestDevWatch: `cairn dev` serves Watch through its in-process watchhub.
func TestDevWatch(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	ports, err := supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	endpoint, stop := startDev(t, etcdctl, t.TempDir(), ports)
	defer stop()
	for _, kv := range [][2]string{{"devwatch/a", "1"}, {"devwatch/b", "2"}} {
		if res := runEtcdctl(t, etcdctl, []string{endpoint}, "", "put", kv[0], kv[1]); res.Stdout != "OK\n" {
			t.Fatalf("put %v: %+v", kv, res)
		}
	}
	lines, _ := etcdctlWatch(t, etcdctl, []string{endpoint}, "devwatch/", "--prefix", "--rev=1")
	want := []string{"PUT", "devwatch/a", "1", "PUT", "devwatch/b", "2"}
	if got := nextLines(t, lines, len(want)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("etcdctl printed %q, want %q", got, want)
	}
}
