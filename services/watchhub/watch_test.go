package watchhub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		MaxCallRecvMsgSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// recvEvents reads events from wch until it has n, failing on a canceled response or after timeout.
func recvEvents(t testing.TB, wch clientv3.WatchChan, n int, timeout time.Duration) []*clientv3.Event {
	t.Helper()
	var got []*clientv3.Event
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case resp, ok := <-wch:
			if !ok {
				t.Fatalf("watch channel closed after %d events", len(got))
			}
			if err := resp.Err(); err != nil {
				t.Fatalf("watch failed after %d events: %v", len(got), err)
			}
			got = append(got, resp.Events...)
		case <-deadline:
			t.Fatalf("got %d events within %v, want %d", len(got), timeout, n)
		}
	}
	return got
}

func describe(evs []*clientv3.Event) []string {
	var out []string
	for _, ev := range evs {
		s := fmt.Sprintf("%s %s@%d=%s", ev.Type, ev.Kv.Key, ev.Kv.ModRevision, ev.Kv.Value)
		if ev.PrevKv != nil {
			s += fmt.Sprintf(" prev=%s", ev.PrevKv.Value)
		}
		out = append(out, s)
	}
	return out
}

// TestClientV3Watches: client/v3's watch options against a hub, all on one client (so on one gRPC stream).
func TestClientV3Watches(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{})
	cli := newClient(t, h.Addr())
	env.put("pre/a", "0") // rev 2
	env.put("pre/b", "0") // rev 3
	tests := []struct {
		name string
		key  string
		opts []clientv3.OpOption
		want []string
	}{
		{"prefix from a past revision", "pre/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(3)},
			[]string{"PUT pre/b@3=0", "PUT pre/a@4=1", "DELETE pre/b@5=", "PUT pre/c@6=1", "PUT pre/a@7=2"}},
		{"prev kv", "pre/a", []clientv3.OpOption{clientv3.WithPrevKV()},
			[]string{"PUT pre/a@4=1 prev=0", "PUT pre/a@7=2 prev=1"}},
		{"no put", "pre/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut()},
			[]string{"DELETE pre/b@5="}},
		{"no delete", "pre/b", []clientv3.OpOption{clientv3.WithFilterDelete(), clientv3.WithRev(2)},
			[]string{"PUT pre/b@3=0"}},
		{"from key", "pre/b", []clientv3.OpOption{clientv3.WithFromKey()},
			[]string{"DELETE pre/b@5=", "PUT pre/c@6=1"}},
		{"range", "pre/a", []clientv3.OpOption{clientv3.WithRange("pre/c")},
			[]string{"PUT pre/a@4=1", "DELETE pre/b@5=", "PUT pre/a@7=2"}},
		{"fragment", "pre/c", []clientv3.OpOption{clientv3.WithFragment()}, []string{"PUT pre/c@6=1"}},
	}
	ctx := ctxT(t)
	chans := make([]clientv3.WatchChan, len(tests))
	for i, tc := range tests {
		chans[i] = cli.Watch(ctx, tc.key, append(tc.opts, clientv3.WithCreatedNotify())...)
		if resp := <-chans[i]; !resp.Created {
			t.Fatalf("%s: first response %+v is not created", tc.name, resp)
		}
	}
	env.put("pre/a", "1") // 4
	env.del("pre/b")      // 5
	env.put("pre/c", "1") // 6
	env.put("pre/a", "2") // 7
	env.put("other", "x") // 8
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := describe(recvEvents(t, chans[i], len(tc.want), 10*time.Second))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("events\n got %v\nwant %v", got, tc.want)
			}
		})
	}
	if n := testutil.ToFloat64(h.metrics.streams); n != 1 {
		t.Fatalf("%v streams for one client's watches, want 1", n)
	}
}

// TestClientV3ProgressAndCompaction: periodic progress notifications, on-demand progress, and a watch from
// a compacted revision, through client/v3.
func TestClientV3ProgressAndCompaction(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{ProgressNotifyInterval: 200 * time.Millisecond})
	cli := newClient(t, h.Addr())
	ctx := ctxT(t)
	openRaw(t, dialHub(t, h.Addr())) // a hub follows the store while it has a stream
	head := env.put("a", "1")
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "hub at the write", func() bool {
		return h.headRev.Load() >= head
	})

	t.Run("periodic progress", func(t *testing.T) {
		wch := cli.Watch(ctx, "quiet", clientv3.WithProgressNotify())
		select {
		case resp := <-wch:
			if !resp.IsProgressNotify() || resp.Header.Revision != head {
				t.Fatalf("response %+v, want a progress notification at %d", resp, head)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no progress notification")
		}
	})
	t.Run("requested progress", func(t *testing.T) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wch := cli.Watch(wctx, "other")
		if err := cli.RequestProgress(wctx); err != nil {
			t.Fatal(err)
		}
		select {
		case resp := <-wch:
			if !resp.IsProgressNotify() || resp.Header.Revision != head {
				t.Fatalf("response %+v, want a progress notification at %d", resp, head)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no progress notification")
		}
	})
	t.Run("compacted start", func(t *testing.T) {
		for i := range 5 {
			env.put("a", fmt.Sprint(i))
		}
		if _, err := env.client().Compact(ctx, &pb.CompactionRequest{Revision: 5}); err != nil {
			t.Fatal(err)
		}
		waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the hub to see the compaction", func() bool {
			h.mu.RLock()
			defer h.mu.RUnlock()
			return h.compactRev == 5
		})
		resp := <-cli.Watch(ctx, "a", clientv3.WithRev(2))
		if !errors.Is(resp.Err(), rpctypes.ErrCompacted) || resp.CompactRevision != 5 {
			t.Fatalf("watch from a compacted revision: err %v compact %d, want ErrCompacted at 5", resp.Err(), resp.CompactRevision)
		}
	})
}

// TestCatchUpBelowTheWindow: a watch from a revision the window no longer holds reads storage history, then
// the window, then goes live, with every revision exactly once and in order.
func TestCatchUpBelowTheWindow(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{WindowRevisions: 5, HistoryPageSize: 7})
	cli := newClient(t, h.Addr())
	const writes = 60
	for i := range writes {
		env.put(fmt.Sprintf("k%02d", i%7), fmt.Sprint(i))
	}
	ctx := ctxT(t)
	wch := cli.Watch(ctx, "k", clientv3.WithPrefix(), clientv3.WithRev(2), clientv3.WithPrevKV())
	got := recvEvents(t, wch, writes, 10*time.Second)
	env.put("k99", "live")
	got = append(got, recvEvents(t, wch, 1, 5*time.Second)...)
	for i, ev := range got {
		if ev.Kv.ModRevision != int64(i+2) {
			t.Fatalf("event %d at revision %d, want %d", i, ev.Kv.ModRevision, i+2)
		}
		if i >= 7 && i < writes && (ev.PrevKv == nil || string(ev.PrevKv.Value) != fmt.Sprint(i-7)) {
			t.Fatalf("event %d prev kv %v, want value %d", i, ev.PrevKv, i-7)
		}
	}
	if testutil.ToFloat64(h.metrics.watchers[stateSynced]) != 1 {
		t.Fatal("the watcher did not end synced")
	}
}

// TestCatchUpBatchesAsEtcd: a watch from long ago gets its events as etcd sends an unsynced watcher's, in
// responses of watchBatchMaxRevs revisions, however storage pages them and wherever storage history meets the
// window.
func TestCatchUpBatchesAsEtcd(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{WindowRevisions: 5, HistoryPageSize: 7})
	rs := openRaw(t, dialHub(t, h.Addr()))
	const writes = watchBatchMaxRevs + 500
	var head int64
	for i := range writes {
		head = env.put(fmt.Sprintf("k%d", i%3), fmt.Sprint(i))
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the hub at the last write", func() bool {
		h.mu.RLock()
		defer h.mu.RUnlock()
		return h.win.head == head
	})
	rs.create(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l"), StartRevision: 2})
	if resp := rs.next(5 * time.Second); !resp.Created {
		t.Fatalf("first response %v, want created", resp)
	}
	var sizes []int
	next := int64(2)
	for next <= head {
		resp := rs.next(5 * time.Second)
		sizes = append(sizes, len(resp.Events))
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != next {
				t.Fatalf("event at revision %d, want %d", ev.Kv.ModRevision, next)
			}
			next++
		}
	}
	if want := []int{watchBatchMaxRevs, 500}; !slices.Equal(sizes, want) {
		t.Fatalf("events per response %v, want %v", sizes, want)
	}
}

// TestProgressRequestWaitsForCatchUp: a ProgressRequest is not answered while a watcher on the stream is
// still catching up (storage away), and is once it is synced.
func TestProgressRequestWaitsForCatchUp(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{WindowRevisions: 2})
	openRaw(t, dialHub(t, h.Addr())) // a hub follows the store while it has a stream
	var head int64
	for i := range 10 {
		head = env.put("k", fmt.Sprint(i))
	}
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "hub at the writes", func() bool {
		return h.headRev.Load() >= head
	})
	env.stopStorage(0)
	rs := openRaw(t, dialHub(t, h.Addr()))
	rs.create(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 2})
	if resp := rs.next(5 * time.Second); !resp.Created {
		t.Fatalf("first response %v, want created", resp)
	}
	rs.requestProgress()
	rs.none(500 * time.Millisecond)
	env.startStorage(0)
	var events int
	for events < 10 {
		resp := rs.next(10 * time.Second)
		if resp.WatchId == invalidWatchID {
			t.Fatalf("progress answered before the watcher was synced: %v", resp)
		}
		events += len(resp.Events)
	}
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the watcher synced", func() bool {
		return testutil.ToFloat64(h.metrics.watchers[stateSynced]) == 1
	})
	rs.requestProgress()
	if resp := rs.next(5 * time.Second); resp.WatchId != invalidWatchID || resp.Header.Revision != head || len(resp.Events) != 0 {
		t.Fatalf("response %v, want a progress notification at %d", resp, head)
	}
}

// TestSlowStreamDoesNotHoldOthers: a stream whose client reads nothing falls behind without slowing the other
// streams or holding more than its buffers; once it reads, it receives every revision once, in order.
func TestSlowStreamDoesNotHoldOthers(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{WatcherBufferResponses: 4, StreamBufferBytes: 64 << 10, WindowRevisions: 50})
	slowConn := dialHub(t, h.Addr())
	slowCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, err := pb.NewWatchClient(slowConn).Watch(slowCtx)
	if err != nil {
		t.Fatal(err)
	}
	if err := slow.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l")}}}); err != nil {
		t.Fatal(err)
	}
	fast := newClient(t, h.Addr())
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the slow watch registered", func() bool {
		return testutil.ToFloat64(h.metrics.watchers[stateSynced]) == 1
	})
	wch := fast.Watch(ctxT(t), "k", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	// The puts wait for the created response: one applied before the hub creates the watch is not its event.
	if resp := <-wch; !resp.Created {
		t.Fatalf("fast watch: %+v (err %v), want created", resp, resp.Err())
	}
	value := strings.Repeat("x", 16<<10)
	const writes = 300
	var first int64
	for i := range writes {
		rev := env.put(fmt.Sprintf("k%d", i%10), value)
		if first == 0 {
			first = rev
		}
		if i%50 == 0 {
			s := h.anyStream(slowCtx)
			if s != nil && s.queuedBytesNow() > h.cfg.StreamBufferBytes+len(value)*2 {
				t.Fatalf("slow stream holds %d bytes, buffer is %d", s.queuedBytesNow(), h.cfg.StreamBufferBytes)
			}
		}
	}
	if got := recvEvents(t, wch, writes, 20*time.Second); got[writes-1].Kv.ModRevision != first+writes-1 {
		t.Fatalf("fast watcher's last event at %d", got[writes-1].Kv.ModRevision)
	}
	if testutil.ToFloat64(h.metrics.fellBehind) == 0 {
		t.Fatal("the slow watcher never fell behind")
	}
	next := first
	for next < first+writes {
		resp, err := slow.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Canceled {
			t.Fatalf("slow watcher canceled at revision %d: %v", next, resp)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != next {
				t.Fatalf("slow watcher got revision %d, want %d", ev.Kv.ModRevision, next)
			}
			next++
		}
	}
}

// anyStream returns one open stream other than those of the client whose context is ctx (tests only).
func (h *Hub) anyStream(context.Context) *stream {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for s := range h.streams {
		for _, w := range s.watchers {
			if w.state != stateSynced {
				return s
			}
		}
	}
	return nil
}

func (s *stream) queuedBytesNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queuedBytes
}

// TestHopelessWatcherIsCanceled: a watcher so far behind that its next revision is compacted is canceled with
// the compact revision.
func TestHopelessWatcherIsCanceled(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{WatcherBufferResponses: 1, StreamBufferBytes: 1, WindowRevisions: 2})
	conn := dialHub(t, h.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := slow.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := slow.Recv(); err != nil || !resp.Created {
		t.Fatalf("created: %v %v", resp, err)
	}
	value := strings.Repeat("x", 256<<10)
	var last int64
	for i := range 40 {
		last = env.put("k", value+fmt.Sprint(i))
	}
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the watcher fell behind", func() bool {
		return testutil.ToFloat64(h.metrics.fellBehind) > 0
	})
	if _, err := env.client().Compact(ctxT(t), &pb.CompactionRequest{Revision: last}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := slow.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Canceled {
			if resp.CompactRevision != last || resp.WatchId != 0 {
				t.Fatalf("canceled %v, want compact revision %d", resp, last)
			}
			break
		}
		if len(resp.Events) == 0 || resp.Events[len(resp.Events)-1].Kv.ModRevision >= last {
			t.Fatalf("response %v before the cancel", resp.Header)
		}
	}
}

// TestCoalescing: watchers with the same range share one encoding per revision, however many streams they
// are on.
func TestCoalescing(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{})
	conn := dialHub(t, h.Addr())
	const streams, perStream = 10, 10
	var raws []*rawStream
	for range streams {
		rs := openRaw(t, conn)
		for range perStream {
			rs.create(&pb.WatchCreateRequest{Key: []byte("hot")})
		}
		for range perStream {
			rs.next(5 * time.Second)
		}
		raws = append(raws, rs)
	}
	if g := testutil.ToFloat64(h.metrics.groups); g != 1 {
		t.Fatalf("%v groups for %d identical watches, want 1", g, streams*perStream)
	}
	encodedBefore := testutil.ToFloat64(h.metrics.encodedResponses)
	const writes = 20
	for i := range writes {
		env.put("hot", fmt.Sprint(i))
	}
	for _, rs := range raws {
		// A sender that fell behind writes a watcher's waiting revisions as one response (merge.go).
		nextRev := map[int64]int64{}
		for events := 0; events < perStream*writes; {
			resp := rs.next(10 * time.Second)
			for _, ev := range resp.Events {
				if last := nextRev[resp.WatchId]; last != 0 && ev.Kv.ModRevision != last {
					t.Fatalf("watch %d: revision %d after %d", resp.WatchId, ev.Kv.ModRevision, last-1)
				}
				nextRev[resp.WatchId] = ev.Kv.ModRevision + 1
			}
			if len(resp.Events) == 0 || resp.Header.Revision != resp.Events[len(resp.Events)-1].Kv.ModRevision {
				t.Fatalf("response %v", resp)
			}
			events += len(resp.Events)
		}
	}
	if enc := testutil.ToFloat64(h.metrics.encodedResponses) - encodedBefore; enc != writes {
		t.Fatalf("%v encodings for %d revisions × %d watchers, want %d", enc, writes, streams*perStream, writes)
	}
}

// TestWatchEventsInOneRevision: a transaction's events reach a watcher in one response, in order.
func TestWatchEventsInOneRevision(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{})
	cli := newClient(t, h.Addr())
	env.put("t3", "c")
	wch := cli.Watch(ctxT(t), "t", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	<-wch
	if _, err := env.client().Txn(ctxT(t), &pb.TxnRequest{Success: []*pb.RequestOp{opPut("t1", "a"), opPut("t2", "b"), opDel("t3")}}); err != nil {
		t.Fatal(err)
	}
	resp := <-wch
	if got := describe(resp.Events); !slices.Equal(got, []string{"PUT t1@3=a", "PUT t2@3=b", "DELETE t3@3="}) {
		t.Fatalf("one response with %v", got)
	}
}

// TestCancelWhileSenderBehind: a stream whose client has stopped reading, with more control responses waiting
// than it has slots for, still removes every watch it is asked to cancel, at once; once the client reads
// again, each watch's events come in order and then its one "canceled".
func TestCancelWhileSenderBehind(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{})
	conn, err := grpc.NewClient(h.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10)) // no window growth
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := pb.NewWatchClient(conn).Watch(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	const watchers = 2 * ctrlSlots
	for id := range int64(watchers) {
		if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
			CreateRequest: &pb.WatchCreateRequest{Key: []byte("k"), WatchId: id}}}); err != nil {
			t.Fatal(err)
		}
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "every watch created", func() bool {
		return testutil.ToFloat64(h.metrics.watcherTotal) == watchers
	})
	first := env.put("k", strings.Repeat("v", 4<<10))
	for range 20 { // 128 watchers × 20 × 4 KiB: far more than the client's window and the sender's quota
		env.put("k", strings.Repeat("v", 4<<10))
	}
	for id := range int64(watchers) {
		if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
			CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}); err != nil {
			t.Fatal(err)
		}
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "every watch removed while the client reads nothing", func() bool {
		return testutil.ToFloat64(h.metrics.watcherTotal) == 0
	})
	next := make([]int64, watchers) // the revision each watch expects next; -1 once canceled
	for i := range next {
		next[i] = first
	}
	for canceled := 0; canceled < watchers; {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		id := resp.WatchId
		if next[id] < 0 {
			t.Fatalf("watch %d: response %v after its cancel", id, resp)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != next[id] {
				t.Fatalf("watch %d: revision %d, want %d", id, ev.Kv.ModRevision, next[id])
			}
			next[id]++
		}
		if resp.Canceled {
			next[id] = -1
			canceled++
		}
	}
}
