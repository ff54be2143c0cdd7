package eventbus

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/eventpb"
	"github.com/cairn-kv/cairn/internal/eventbus/eventbustest"
	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startServer(t *testing.T, port int) *Embedded {
	t.Helper()
	srv, err := StartEmbedded(EmbeddedConfig{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func record(index uint64) *eventpb.AppliedRecord {
	return &eventpb.AppliedRecord{Index: index, Revision: int64(index) + 1, Events: []*mvccpb.Event{{
		Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("k" + strconv.Itoa(int(index))), ModRevision: int64(index) + 1},
	}}}
}

// collector gathers what a subscription receives, per member.
type collector struct {
	mu       sync.Mutex
	byMember map[uint64][]uint64
	metas    []Meta
}

func (c *collector) handle(rec *eventpb.AppliedRecord, meta Meta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byMember == nil {
		c.byMember = map[uint64][]uint64{}
	}
	c.byMember[meta.Member] = append(c.byMember[meta.Member], rec.Index)
	c.metas = append(c.metas, meta)
}

func (c *collector) count(member uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byMember[member])
}

// subscribeAll connects a subscriber to srv and subscribes each collector to prefix "test" (with
// SubscribeFirstCopies when its value is true, Subscribe otherwise); the subscriptions are known to the server
// when it returns, and the connection closes with the test.
func subscribeAll(t *testing.T, srv *Embedded, collectors map[*collector]bool) *nats.Conn {
	t.Helper()
	sub, err := Connect(srv.ClientURL(), "sub", quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	subscribeCollectors(t, sub, collectors)
	return sub
}

// subscribeCollectors subscribes each collector on sub to prefix "test" (with SubscribeFirstCopies when its
// value is true, Subscribe otherwise); the subscriptions are known to the server when it returns.
func subscribeCollectors(t *testing.T, sub *nats.Conn, collectors map[*collector]bool) {
	t.Helper()
	for c, firstCopies := range collectors {
		subscribe := Subscribe
		if firstCopies {
			subscribe = func(nc *nats.Conn, prefix string, handle Handler) (*nats.Subscription, error) {
				return SubscribeFirstCopies(nc, prefix, nil, handle)
			}
		}
		if _, err := subscribe(sub, "test", c.handle); err != nil {
			t.Fatal(err)
		}
	}
	eventbustest.Flush(t, sub) // not sub.Flush: some callers run in a synctest bubble
}

func TestPublishSubscribeInOrderPerMember(t *testing.T) {
	srv := startServer(t, -1)
	var got collector
	subscribeAll(t, srv, map[*collector]bool{&got: false})
	const records = 500
	for _, member := range []uint64{0x1a, 0x2b} {
		publishQueued(t, srv.ClientURL(), member, 1, records, record)
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "all records", func() bool {
		return got.count(0x1a) == records && got.count(0x2b) == records
	})
	for member, indexes := range got.byMember {
		for i, index := range indexes {
			if index != uint64(i+1) {
				t.Fatalf("member %x: record %d has index %d, want %d (out of order)", member, i, index, i+1)
			}
		}
	}
	m := got.metas[0]
	if m.Index == 0 || m.Revision != int64(m.Index)+1 || m.Trace["traceparent"] == "" {
		t.Fatalf("meta from headers = %+v, want index, revision = index+1 and a traceparent", m)
	}
}

func TestPublishNeverBlocksAndCountsDrops(t *testing.T) {
	srv := startServer(t, -1)
	nc, err := Connect(srv.ClientURL(), "pub", quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	reg := prometheus.NewRegistry()
	pub := NewPublisher(nc, PublisherConfig{MemberID: 1, QueueLength: 2}, reg, quietLogger())
	// Not started: nothing drains the queue, so every record past its length must be dropped at once.
	done := make(chan struct{})
	go func() {
		for i := uint64(1); i <= 10; i++ {
			pub.Publish(record(i), nil)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Publish blocked on a full queue")
	}
	if got := testutil.ToFloat64(pub.dropped); got != 8 {
		t.Fatalf("dropped = %v, want 8", got)
	}
}

func TestPublisherSurvivesServerRestart(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	_ = lis.Close()
	srv, err := StartEmbedded(EmbeddedConfig{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	pubConn, err := Connect(url, "pub", quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pubConn.Close()
	pub := NewPublisher(pubConn, PublisherConfig{MemberID: 7}, nil, quietLogger())
	pub.Start()
	defer func() { _ = pub.Stop(context.Background()) }()

	srv.Shutdown()
	startServer(t, port)
	subConn, err := Connect(url, "sub", quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer subConn.Close()
	var got collector
	if _, err := Subscribe(subConn, "", got.handle); err != nil {
		t.Fatal(err)
	}
	if err := subConn.Flush(); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "publisher reconnect", pubConn.IsConnected)
	// Keep publishing until one arrives: records sent while the subscription was not yet known are lost,
	// which the bus allows; what must hold is that the publisher works again after the restart.
	next := uint64(1)
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "a record after the restart", func() bool {
		pub.Publish(record(next), nil)
		next++
		return got.count(7) > 0
	})
}

func TestSubscribeFirstCopiesDeliversEachIndexOnce(t *testing.T) {
	srv := startServer(t, -1)
	var once, all collector
	sub := subscribeAll(t, srv, map[*collector]bool{&once: true, &all: false})
	const records = 300
	members := []uint64{0x1a, 0x2b, 0x3c}
	for _, member := range members {
		publishQueued(t, srv.ClientURL(), member, 1, records, record)
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "every copy on the plain subscription", func() bool {
		return all.count(0x1a)+all.count(0x2b)+all.count(0x3c) == len(members)*records
	})
	// Each subscription has its own goroutine: the first copies may still be on their way.
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "first copies", func() bool {
		return once.count(0x1a)+once.count(0x2b)+once.count(0x3c) >= records
	})
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	once.mu.Lock()
	defer once.mu.Unlock()
	seen := map[uint64]int{}
	for _, indexes := range once.byMember {
		for _, index := range indexes {
			seen[index]++
		}
	}
	if len(seen) != records {
		t.Fatalf("first copies cover %d indexes, want %d", len(seen), records)
	}
	for index, n := range seen {
		if n != 1 {
			t.Fatalf("index %d handed on %d times, want once", index, n)
		}
	}
}

// TestSubscribeFirstCopiesDropsUnwanted: messages that arrive while the consumer does not want them are
// dropped, and their indexes are not remembered, so the first copy that arrives once it wants them is handed on;
// a later copy is not.
func TestSubscribeFirstCopiesDropsUnwanted(t *testing.T) {
	srv := startServer(t, -1)
	var gated, all collector
	var wanted atomic.Bool
	var wantedCalls atomic.Int64
	sub := subscribeAll(t, srv, nil)
	allSub, err := Subscribe(sub, "test", all.handle)
	if err != nil {
		t.Fatal(err)
	}
	gatedSub, err := SubscribeFirstCopies(sub, "test", func() bool { wantedCalls.Add(1); return wanted.Load() }, gated.handle)
	if err != nil {
		t.Fatal(err)
	}
	eventbustest.Flush(t, sub)
	// indexesUntil waits for sentinel, published after everything before it, and returns the indexes handed on.
	indexesUntil := func(sentinel uint64) map[uint64]int {
		t.Helper()
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the sentinel", func() bool {
			gated.mu.Lock()
			defer gated.mu.Unlock()
			for _, indexes := range gated.byMember {
				if slices.Contains(indexes, sentinel) {
					return true
				}
			}
			return false
		})
		gated.mu.Lock()
		defer gated.mu.Unlock()
		got := map[uint64]int{}
		for _, indexes := range gated.byMember {
			for _, index := range indexes {
				got[index]++
			}
		}
		return got
	}
	const records = 100
	publishQueued(t, srv.ClientURL(), 0x1a, 1, records, record)
	// Each subscription hands its messages on from a goroutine of its own: the gated one has judged them all
	// once it was asked about as many as it was delivered, as many as the other one, which has them all.
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the unwanted copies judged", func() bool {
		allDelivered, _ := allSub.Delivered()
		gatedDelivered, _ := gatedSub.Delivered()
		pending, _, _ := gatedSub.Pending()
		return all.count(0x1a) == records && gatedDelivered == allDelivered && pending == 0 &&
			wantedCalls.Load() == gatedDelivered
	})
	wanted.Store(true)
	publishQueued(t, srv.ClientURL(), 0x1a, 1000, 1000, record)
	if got := indexesUntil(1000); len(got) != 1 {
		t.Fatalf("handed on %v; want only the sentinel: the copies sent while unwanted dropped", got)
	}
	publishQueued(t, srv.ClientURL(), 0x2b, 1, records, record) // wanted: handed on, once
	publishQueued(t, srv.ClientURL(), 0x3c, 1, records, record) // a later copy: not handed on
	publishQueued(t, srv.ClientURL(), 0x3c, 2000, 2000, record) // the sentinel
	got := indexesUntil(2000)
	for index := uint64(1); index <= records; index++ {
		if got[index] != 1 {
			t.Fatalf("index %d handed on %d times, want once (from the first copy sent while wanted)", index, got[index])
		}
	}
	if gated.count(0x2b) != records || gated.count(0x3c) != 1 {
		t.Fatalf("handed on %d records of the first wanted copy and %d of the second, want %d and only its sentinel",
			gated.count(0x2b), gated.count(0x3c), records)
	}
}

func TestRecentIndexes(t *testing.T) {
	r := newRecentIndexes()
	for _, tt := range []struct {
		index uint64
		want  bool
	}{{5, true}, {5, false}, {6, true}, {0, true}, {0, true}, {5 + recentIndexWindow, true}, {5, true}, {6, false}} {
		if got := r.first(tt.index); got != tt.want {
			t.Fatalf("first(%d) = %v, want %v", tt.index, got, tt.want)
		}
	}
	// Seen now: 5, 6 (5 + window was overwritten by 5 again).
	for _, tt := range []struct {
		first, last uint64
		want        bool
	}{{5, 6, true}, {5, 5, true}, {6, 6, true}, {4, 6, false}, {5, 7, false}, {0, 6, false}, {6, 5, false}, {1, 1 + recentIndexWindow, false}} {
		if got := r.allSeen(tt.first, tt.last); got != tt.want {
			t.Fatalf("allSeen(%d, %d) = %v, want %v", tt.first, tt.last, got, tt.want)
		}
	}
}

// publishQueued queues records first..last on a publisher of member before starting it, so they leave in
// as few messages as the batch limits allow, and stops it once they are sent.
func publishQueued(t *testing.T, url string, member uint64, first, last uint64, rec func(uint64) *eventpb.AppliedRecord) {
	t.Helper()
	nc, err := Connect(url, "pub", quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	pub := NewPublisher(nc, PublisherConfig{SubjectPrefix: "test", MemberID: member}, nil, quietLogger())
	for i := first; i <= last; i++ {
		pub.Publish(rec(i), map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i, i)})
	}
	pub.Start()
	if err := pub.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestPublisherBatchesWhatIsQueued(t *testing.T) {
	big := func(index uint64) *eventpb.AppliedRecord {
		r := record(index)
		r.Events[0].Kv.Value = make([]byte, 1<<20)
		return r
	}
	tests := []struct {
		name      string
		records   uint64
		rec       func(uint64) *eventpb.AppliedRecord
		wantMsgs  int
		maxSizeOK int
	}{
		{"small records fill batches of maxBatchRecords", 1000, record, 2, 8 << 20},
		{"a batch over the payload limit is split", 20, big, 4, 8 << 20}, // 20 MiB in halves: 4 messages of 5 MiB
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t, -1)
			var got collector
			sub := subscribeAll(t, srv, map[*collector]bool{&got: false})
			raw, err := sub.SubscribeSync(AllSubjects("test"))
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Flush(); err != nil {
				t.Fatal(err)
			}
			publishQueued(t, srv.ClientURL(), 0x1a, 1, tt.records, tt.rec)
			waittest.Until(t, 10*time.Second, 5*time.Millisecond, "all records", func() bool {
				return got.count(0x1a) == int(tt.records)
			})
			for i, index := range got.byMember[0x1a] {
				if index != uint64(i+1) {
					t.Fatalf("record %d has index %d (out of order)", i, index)
				}
			}
			for i, m := range got.metas {
				if m.Index != uint64(i+1) || m.Revision != int64(m.Index)+1 || m.Member != 0x1a ||
					m.Trace["traceparent"] != fmt.Sprintf("00-%032x-%016x-01", m.Index, m.Index) {
					t.Fatalf("meta %d = %+v, want its own index, revision, member and trace", i, m)
				}
			}
			// Each expected message may still be on its way to this subscription (a 5 MiB one took over 100 ms
			// under -race); once they are in, none more may come.
			msgs := 0
			for {
				wait := 10 * time.Second
				if msgs >= tt.wantMsgs {
					wait = 100 * time.Millisecond
				}
				msg, err := raw.NextMsg(wait)
				if err != nil {
					break
				}
				msgs++
				if len(msg.Data) > tt.maxSizeOK {
					t.Fatalf("message of %d bytes, over the payload limit", len(msg.Data))
				}
			}
			if msgs != tt.wantMsgs {
				t.Fatalf("%d records went in %d messages, want %d", tt.records, msgs, tt.wantMsgs)
			}
		})
	}
}

// TestFirstCopiesAcrossBatchBoundaries: members batch differently, so one member's message can overlap what
// another's already delivered; only the indexes not yet seen are handed on, once each.
func TestFirstCopiesAcrossBatchBoundaries(t *testing.T) {
	srv := startServer(t, -1)
	var once collector
	sub := subscribeAll(t, srv, map[*collector]bool{&once: true})
	publishQueued(t, srv.ClientURL(), 0x1a, 1, 100, record)
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 1a's records", func() bool {
		return once.count(0x1a) == 100
	})
	publishQueued(t, srv.ClientURL(), 0x2b, 50, 150, record) // overlaps 50..100
	publishQueued(t, srv.ClientURL(), 0x3c, 1, 150, record)  // all seen: not handed on
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 2b's new records", func() bool {
		return once.count(0x2b) == 50
	})
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	once.mu.Lock()
	defer once.mu.Unlock()
	if got := once.byMember[0x2b]; got[0] != 101 || got[len(got)-1] != 150 {
		t.Fatalf("member 2b handed on %d..%d, want 101..150", got[0], got[len(got)-1])
	}
	if n := len(once.byMember[0x3c]); n != 0 {
		t.Fatalf("member 3c's copies of seen indexes handed on %d times, want none", n)
	}
}

// TestSubscribeLeaseChanges checks that a lease subscription gets each record once, with its position and
// lease changes exactly as published and without the events.
// TestSubscribeLeaseChanges: a lease subscriber gets, once, each record that changes a lease, stripped to its
// position and lease changes; a batch without lease changes reaches it only as its last record's position.
func TestSubscribeLeaseChanges(t *testing.T) {
	withLeases := func(i uint64) *eventpb.AppliedRecord {
		rec := record(i)
		rec.Term = 7
		if i%3 == 0 {
			rec.Leases = []*eventpb.LeaseChange{{Type: eventpb.LeaseChange_GRANTED, Id: int64(i), Ttl: 30},
				{Type: eventpb.LeaseChange_CHECKPOINTED, Id: int64(i), RemainingTtl: 12}}
		}
		return rec
	}
	withoutLeases := func(i uint64) *eventpb.AppliedRecord { rec := record(i); rec.Term = 7; return rec }
	tests := []struct {
		name    string
		records func(uint64) *eventpb.AppliedRecord
		want    []uint64
	}{
		{"lease changes", withLeases, []uint64{3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45, 48}},
		{"position only", withoutLeases, []uint64{50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t, -1)
			sub, err := Connect(srv.ClientURL(), "sub", quietLogger(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			var mu sync.Mutex
			var got []*eventpb.AppliedRecord
			if _, err := SubscribeLeaseChanges(sub, "test", func(rec *eventpb.AppliedRecord, _ Meta) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, rec)
			}); err != nil {
				t.Fatal(err)
			}
			if err := sub.Flush(); err != nil {
				t.Fatal(err)
			}
			for _, member := range []uint64{0x1a, 0x2b} { // both send: each record once, whoever sent it
				publishQueued(t, srv.ClientURL(), member, 1, 50, func(i uint64) *eventpb.AppliedRecord {
					rec := tt.records(i)
					rec.MemberId = member
					return rec
				})
			}
			waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the lease records", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(got) >= len(tt.want)
			})
			if err := sub.Flush(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != len(tt.want) {
				t.Fatalf("%d records handed on, want %d", len(got), len(tt.want))
			}
			for i, rec := range got {
				w := tt.records(tt.want[i])
				w.Events, w.MemberId = nil, rec.MemberId
				if rec.MemberId != 0x1a && rec.MemberId != 0x2b || !proto.Equal(rec, w) {
					t.Fatalf("record %d: got %v, want %v", i, rec, w)
				}
			}
		})
	}
}

// TestConfirm: Confirm returns once the server has a subscription that reached it late, so a record published
// right after reaches it; with no server it gives up after its wait.
func TestConfirm(t *testing.T) {
	srv := startServer(t, -1)
	const delay = 300 * time.Millisecond
	slow := loopbacktest.DelayedProxy(t, srv.ClientURL()[len("nats://"):], delay)
	sub, err := Connect("nats://"+slow, "sub", quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	var got collector
	if _, err := Subscribe(sub, "test", got.handle); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := Confirm(context.Background(), sub, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("Confirm returned after %v, before the subscription could reach the server (%v)", took, delay)
	}
	publishQueued(t, srv.ClientURL(), 0x1a, 1, 1, record)
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the record published after Confirm", func() bool {
		return got.count(0x1a) == 1
	})

	down, err := Connect("nats://"+loopbacktest.Addr(t), "down", quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	start = time.Now()
	if err := Confirm(context.Background(), down, 200*time.Millisecond); err == nil {
		t.Fatal("Confirm with no server returned nil")
	} else if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Confirm with no server took %v, want about its 200ms wait", took)
	}
}
