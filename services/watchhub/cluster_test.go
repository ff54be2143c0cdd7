package watchhub_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/testing/watchtest"
	"github.com/cairn-kv/cairn/services/watchhub"
)

// etcdctlWatch runs `etcdctl watch args...` against endpoints.
func etcdctlWatch(t *testing.T, etcdctl, endpoints string, args ...string) (<-chan string, func() error) {
	t.Helper()
	return etcdreftest.EtcdctlLines(t, etcdctl, 30*time.Second, append(append([]string{"watch"}, args...), "--endpoints="+endpoints)...)
}

func expectLines(t *testing.T, lines <-chan string, want ...string) {
	t.Helper()
	if got := etcdreftest.NextLines(t, lines, len(want), 15*time.Second); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("etcdctl printed %q, want %q", got, want)
	}
}

// TestEtcdctlWatchThroughFrontends: the real etcdctl v3.7.3 watches a 3-member cluster through its frontends,
// which relay to two watchhubs.
func TestEtcdctlWatchThroughFrontends(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	c := clustertest.Start(t, clustertest.Options{Watchhubs: 2})
	endpoints := strings.Join(c.Endpoints(), ",")
	cli := c.Client(t)
	ctx := context.Background()
	first, err := cli.Put(ctx, "foo/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	start := first.Header.Revision
	for _, op := range []clientv3.Op{clientv3.OpPut("foo/b", "2"), clientv3.OpPut("foo/a", "3"), clientv3.OpDelete("foo/b")} {
		if _, err := cli.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("prefix from a revision", func(t *testing.T) {
		lines, _ := etcdctlWatch(t, etcdctl, endpoints, "foo/", "--prefix", fmt.Sprintf("--rev=%d", start))
		expectLines(t, lines, "PUT", "foo/a", "1", "PUT", "foo/b", "2", "PUT", "foo/a", "3", "DELETE", "foo/b")
	})
	t.Run("prev kv, live", func(t *testing.T) {
		lines, _ := etcdctlWatch(t, etcdctl, endpoints, "foo/a", "--prev-kv")
		// etcdctl prints nothing once its watch is created: put until the first event shows.
		var line string
		for value := 4; line == ""; value++ {
			if _, err := cli.Put(ctx, "foo/a", fmt.Sprint(value)); err != nil {
				t.Fatal(err)
			}
			select {
			case line = <-lines:
			case <-time.After(100 * time.Millisecond):
			}
			if value > 200 {
				t.Fatal("etcdctl printed no event")
			}
		}
		var rest []string
		for range 4 {
			rest = append(rest, <-lines)
		}
		var prev, cur int
		fmt.Sscan(rest[1], &prev)
		fmt.Sscan(rest[3], &cur)
		if line != "PUT" || rest[0] != "foo/a" || rest[2] != "foo/a" || prev != cur-1 {
			t.Fatalf("etcdctl printed %q %q, want PUT, foo/a, the previous value, foo/a, the value", line, rest)
		}
	})
	t.Run("compacted start", func(t *testing.T) {
		resp, err := cli.Put(ctx, "foo/c", "5")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
		for _, w := range c.Watchhubs() {
			direct := c.Client(t, w.Hub().Addr())
			waittest.Until(t, 10*time.Second, 5*time.Millisecond, "hub "+w.Name+" to know the compaction", func() bool {
				wctx, wcancel := context.WithCancel(ctx)
				defer wcancel()
				r := <-direct.Watch(wctx, "foo/a", clientv3.WithRev(start))
				return r.CompactRevision == resp.Header.Revision
			})
		}
		lines, wait := etcdctlWatch(t, etcdctl, endpoints, "foo/a", fmt.Sprintf("--rev=%d", start))
		var out []string
		for l := range lines {
			out = append(out, l)
		}
		err = wait()
		if text := strings.Join(out, "\n"); err == nil || !strings.Contains(text, "required revision has been compacted") {
			t.Fatalf("etcdctl exited with %v, output %q; want the compaction error", err, text)
		}
	})
}

// TestClientV3ThroughFrontends: many watches on one client stream, progress notifications and fragments,
// through a frontend relaying to the hubs.
func TestClientV3ThroughFrontends(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1, Watchhubs: 2,
		ConfigureWatchhub: func(cfg *watchhub.Config) { cfg.ProgressNotifyInterval = 200 * time.Millisecond }})
	cli := c.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const watches = 50
	var chans []clientv3.WatchChan
	for i := range watches {
		chans = append(chans, cli.Watch(ctx, fmt.Sprintf("k%02d", i), clientv3.WithCreatedNotify()))
		if resp := <-chans[i]; !resp.Created {
			t.Fatalf("watch %d: %v", i, resp.Err())
		}
	}
	streams := 0.0
	for _, w := range c.Watchhubs() {
		streams += metricValue(t, w.Hub(), "etcd_debugging_mvcc_watch_stream_total")
	}
	if streams != 1 {
		t.Fatalf("%v hub streams for one client's %d watches, want 1", streams, watches)
	}
	for i := range watches {
		if _, err := cli.Put(ctx, fmt.Sprintf("k%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	clusterID := c.Members()[0].Node().ClusterID()
	for i, wch := range chans {
		select {
		case resp := <-wch:
			if len(resp.Events) != 1 || string(resp.Events[0].Kv.Key) != fmt.Sprintf("k%02d", i) {
				t.Fatalf("watch %d got %+v", i, resp)
			}
			if h := resp.Header; h.ClusterId != clusterID || h.MemberId != c.Members()[0].ID() || h.RaftTerm == 0 {
				t.Fatalf("watch %d header %+v, want cluster %x, member %x and a term", i, h, clusterID, c.Members()[0].ID())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("watch %d got nothing", i)
		}
	}

	progress := cli.Watch(ctx, "idle", clientv3.WithProgressNotify())
	select {
	case resp := <-progress:
		if !resp.IsProgressNotify() {
			t.Fatalf("%+v is not a progress notification", resp)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no progress notification")
	}

	big := strings.Repeat("x", 1<<20)
	for _, k := range []string{"big/1", "big/2", "big/3"} {
		if _, err := cli.Put(ctx, k, big); err != nil {
			t.Fatal(err)
		}
	}
	fragCli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
		MaxCallRecvMsgSize: 3 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer fragCli.Close()
	resp := <-fragCli.Watch(ctx, "big/", clientv3.WithPrefix(), clientv3.WithRev(1), clientv3.WithFragment())
	if err := resp.Err(); err != nil || len(resp.Events) != 3 {
		t.Fatalf("fragmented watch: %d events, %v", len(resp.Events), err)
	}
	resp = <-fragCli.Watch(ctx, "big/", clientv3.WithPrefix(), clientv3.WithRev(1))
	if resp.Err() == nil {
		t.Fatal("an unfragmented 3 MiB response fit a 3 MiB client limit")
	}
}

// metricValue reads one unlabelled metric of a hub's registry.
func metricValue(t *testing.T, h *watchhub.Hub, name string) float64 {
	t.Helper()
	families, err := h.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue() + f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestEveryRevisionOnceThroughClusterFaults: 100 watchers through three frontends each see every revision of
// a write stream exactly once and in order while a hub stops and starts, a storage replica stops and starts,
// and the NATS server stops and starts.
func TestEveryRevisionOnceThroughClusterFaults(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Watchhubs: 2})
	writer := c.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := writer.Put(ctx, "w/start", "0")
	if err != nil {
		t.Fatal(err)
	}
	start := first.Header.Revision + 1
	const writes = 600
	var clients []*clientv3.Client
	for i := range 10 {
		clients = append(clients, c.Client(t, c.Endpoints()[i%len(c.Endpoints())]))
	}
	watchers := watchtest.Start(ctx, clients, 10, "w/", start)
	hubs, members := c.Watchhubs(), c.Members()
	faults := map[int]func(){
		100: hubs[0].Stop,
		200: func() { mustStart(t, hubs[0].Start()) },
		250: members[2].StopStorage,
		350: func() { mustStart(t, members[2].StartStorage()) },
		400: c.StopNATS,
		500: func() { mustStart(t, c.StartNATS()) },
		550: hubs[1].Stop,
	}
	var last int64
	for i := range writes {
		if f := faults[i]; f != nil {
			f()
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := writer.Put(wctx, fmt.Sprintf("w/%d", i), "v")
		wcancel()
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		last = resp.Header.Revision
	}
	waittest.Until(t, 60*time.Second, 5*time.Millisecond, "every watcher at the last revision", func() bool {
		return watchers.Done(last)
	})
	if err := watchers.ErrUnlessAt(last); err != nil {
		t.Fatal(err)
	}
}

func mustStart(t *testing.T, err error) {
	if err != nil {
		t.Error(err)
	}
}
