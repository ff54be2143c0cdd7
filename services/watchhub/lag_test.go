package watchhub

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/wiremsg"
)

func TestLagOf(t *testing.T) {
	epoch := time.Now()
	h := &Hub{lag: lagPolicy{epoch: epoch, bound: time.Second}}
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	for _, tc := range []struct {
		name    string
		created time.Duration
		arrived time.Time
		now     time.Time
		want    time.Duration
	}{
		{"unknown arrival is no lag", 0, time.Time{}, at(time.Hour), 0},
		{"live: from the revision's arrival", 0, at(2 * time.Second), at(5 * time.Second), 3 * time.Second},
		{"from the past: from the watch's creation", 10 * time.Second, at(time.Second), at(12 * time.Second), 2 * time.Second},
		{"arrived after creation", time.Second, at(3 * time.Second), at(3500 * time.Millisecond), 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := h.lagOf(&watcher{created: tc.created}, tc.arrived, tc.now); got != tc.want {
				t.Fatalf("lag %v, want %v", got, tc.want)
			}
		})
	}
}

func TestArrivalOf(t *testing.T) {
	h := &Hub{win: newWindow(10, 3, 1<<20)}
	base := time.Now()
	for rev := int64(11); rev <= 15; rev++ { // the window keeps 13..15
		if err := h.win.append(revisionEvents{rev: rev, received: base.Add(time.Duration(rev) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		rev  int64
		want time.Time
	}{
		{14, base.Add(14 * time.Second)},
		{11, base.Add(13 * time.Second)}, // below the window: its oldest arrival, a lower bound on the age
		{16, time.Time{}},                // above the head: not behind
	} {
		if got := h.arrivalOf(tc.rev); !got.Equal(tc.want) {
			t.Errorf("arrivalOf(%d) = %v, want %v", tc.rev, got, tc.want)
		}
	}
}

// TestLaggingWatcherIsCanceled: a stream whose client stops reading while events pile up falls more than
// MaxWatchLag behind; when its sender gets to write again, its watcher is canceled with the reason instead of
// being served late, after every revision it was sent, once and in order. A watcher that keeps up receives
// every revision once, within the bound (the lag histogram), and the canceled client can re-watch from its
// next revision on the same stream and lose nothing.
func TestLaggingWatcherIsCanceled(t *testing.T) {
	const bound = 2048 * time.Millisecond // a bucket bound of the lag histogram
	env := newTestEnv(t, 1)
	h := env.startHub(Config{MaxWatchLag: bound, WatcherBufferResponses: 4, StreamBufferBytes: 64 << 10})
	// A fixed flow-control window (no BDP growth), so that the hub's writes block once the client stops reading.
	slowConn, err := grpc.NewClient(h.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slowConn.Close() })
	slowCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, err := pb.NewWatchClient(slowConn).Watch(slowCtx)
	if err != nil {
		t.Fatal(err)
	}
	create := func(start int64) {
		t.Helper()
		if err := slow.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			Key: []byte("k"), RangeEnd: []byte("l"), StartRevision: start}}}); err != nil {
			t.Fatal(err)
		}
	}
	create(0)
	if resp, err := slow.Recv(); err != nil || !resp.Created || resp.WatchId != 0 {
		t.Fatalf("created: %v %v", resp, err)
	}
	fast := newClient(t, h.Addr())
	wch := fast.Watch(ctxT(t), "k", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	// The puts wait for the created response: one applied before the hub creates the watch is not its event.
	if resp := <-wch; !resp.Created {
		t.Fatalf("fast watch: %+v (err %v), want created", resp, resp.Err())
	}

	value := strings.Repeat("x", 16<<10)
	const writes = 200
	var first int64
	for i := range writes {
		rev := env.put(fmt.Sprintf("k%d", i%10), value)
		if first == 0 {
			first = rev
		}
	}
	last := first + writes - 1
	got := recvEvents(t, wch, writes, 20*time.Second)
	for i, ev := range got {
		if ev.Kv.ModRevision != first+int64(i) {
			t.Fatalf("fast watcher's event %d at revision %d, want %d", i, ev.Kv.ModRevision, first+int64(i))
		}
	}
	// Every revision has reached the hub (the fast watcher has them all): once the bound has passed, whatever
	// the slow watcher was not sent is older than it.
	caughtUp := time.Now()
	waittest.Until(t, 3*bound, 20*time.Millisecond, "the slow watcher's backlog older than the bound", func() bool {
		return time.Since(caughtUp) > bound+100*time.Millisecond
	})

	next := first
	for {
		resp, err := slow.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != next {
				t.Fatalf("slow watcher got revision %d, want %d", ev.Kv.ModRevision, next)
			}
			next++
		}
		if resp.Canceled {
			if resp.WatchId != 0 || resp.CompactRevision != 0 || resp.CancelReason != wiremsg.LagCancelReason(bound) {
				t.Fatalf("canceled %v, want watch 0 with reason %q", resp, wiremsg.LagCancelReason(bound))
			}
			break
		}
	}
	if next > last {
		t.Fatalf("the slow watcher was sent every revision (to %d) before its cancel", next-1)
	}
	if n := testutil.ToFloat64(h.metrics.lag.canceled); n != 1 {
		t.Fatalf("watchers_lag_canceled_total %v, want 1", n)
	}
	// Re-watching from the next revision on the same stream loses nothing: the rest comes from the window.
	create(next)
	for next <= last {
		resp, err := slow.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Canceled {
			t.Fatalf("re-watch canceled: %v", resp)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != next {
				t.Fatalf("re-watch got revision %d, want %d", ev.Kv.ModRevision, next)
			}
			next++
		}
	}
	assertLagWithin(t, h, bound)
}

// assertLagWithin checks that every lag the hub recorded for a served watcher is within bound. Senders add
// their lags to the histogram when they pause, so it waits for the first.
func assertLagWithin(t *testing.T, h *Hub, bound time.Duration) {
	t.Helper()
	var hist *dto.Histogram
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "a lag recorded", func() bool {
		hist = lagHistogram(t, h)
		return hist.GetSampleCount() > 0
	})
	for _, b := range hist.GetBucket() {
		if b.GetUpperBound() == bound.Seconds() {
			if b.GetCumulativeCount() != hist.GetSampleCount() {
				t.Fatalf("%d of %d served watchers' lags above %v", hist.GetSampleCount()-b.GetCumulativeCount(),
					hist.GetSampleCount(), bound)
			}
			return
		}
	}
	t.Fatalf("no histogram bucket at %v", bound)
}

// lagHistogram gathers cairn_watchhub_watch_lag_seconds.
func lagHistogram(t *testing.T, h *Hub) *dto.Histogram {
	t.Helper()
	families, err := h.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "cairn_watchhub_watch_lag_seconds" {
			return f.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatal("cairn_watchhub_watch_lag_seconds not registered")
	return nil
}
