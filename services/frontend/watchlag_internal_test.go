package frontend

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// fakeHubStream is a relay's upstream: the hub's response header, and the requests the relay sends.
type fakeHubStream struct {
	grpc.ClientStream
	header metadata.MD
	mu     sync.Mutex
	sent   []int64  // the watch IDs of the cancel requests sent
	acks   []uint64 // the acknowledgments sent
}

func (f *fakeHubStream) Header() (metadata.MD, error) { return f.header, nil }
func (f *fakeHubStream) SendMsg(m any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if encoded, ok := m.(*wiremsg.Encoded); ok {
		req := new(pb.WatchRequest)
		if err := proto.Unmarshal(encoded.Parts.Materialize(), req); err != nil {
			return err
		}
		n, ok := wiremsg.ReadRelayAck(req.ProtoReflect().GetUnknown())
		if !ok {
			return fmt.Errorf("encoded request %v is no acknowledgment", req)
		}
		f.acks = append(f.acks, n)
		return nil
	}
	f.sent = append(f.sent, m.(*pb.WatchRequest).GetCancelRequest().GetWatchId())
	return nil
}

func (f *fakeHubStream) acked() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.acks)
}
func (f *fakeHubStream) canceled() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sent)
}

// hubResponse is one response in a hub's frame, with its lag stamp.
type hubResponse struct {
	resp  *pb.WatchResponse
	stamp uint64
}

func event(id, rev int64) *pb.WatchResponse {
	return &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: rev}, WatchId: id,
		Events: []*mvccpb.Event{{Kv: &mvccpb.KeyValue{Key: []byte("k"), ModRevision: rev}}}}
}

// frameOf is the frame a hub sends for responses: a stamped batch, in a Held as the relay receives it.
func frameOf(t *testing.T, responses []hubResponse) *wiremsg.Held {
	var b wiremsg.Batch
	for _, r := range responses {
		data, err := proto.Marshal(r.resp)
		if err != nil {
			t.Fatal(err)
		}
		b.Stamp(r.stamp)
		b.Add(mem.SliceBuffer(data))
	}
	return &wiremsg.Held{Buf: mem.SliceBuffer(b.Take().Parts.Materialize())}
}

// TestRelayLagBound: a relay whose hub stamps its batches cancels, just before it would send it, a watch whose
// response is more than the hub's bound behind, measured from the quickest delivery it saw, whatever the
// hub's clock reads: the client gets one cancel with the hub's reason and the late response's header, the
// hub a cancel request, and what the hub still sends for the watch is dropped up to the hub's "canceled" that
// removes it (not its cancel for compaction). Responses without a stamp are never late; a hub that does not
// stamp has nothing checked.
func TestRelayLagBound(t *testing.T) {
	const bound = 5 * time.Second
	const hubEpoch = uint64(1e15) // the hub's clock is days ahead of the relay's: it does not matter
	ms := func(n int) uint64 { return hubEpoch + uint64(n)*uint64(time.Millisecond) }
	reason := wiremsg.LagCancelReason(bound)
	type frame struct {
		at        time.Duration // the relay's clock when the frame is received
		responses []hubResponse
	}
	for _, tc := range []struct {
		name   string
		header metadata.MD
		frames []frame
		// blocked is how long the client's send of a response blocks, by its watch ID and revision
		blocked  map[string]time.Duration
		want     []string // what the client gets
		cancels  []int64  // the hub is asked to cancel
		observed int      // frames that sent a stamped response, each observed with its largest lag
		lagSum   float64  // the sum of those observations, in seconds
	}{
		{
			name:   "a send that blocks makes the rest of the frame late",
			header: metadata.Pairs(wiremsg.RelayBatchHeader, wiremsg.RelayBatchStamped, wiremsg.RelayLagBoundHeader, bound.String()),
			frames: []frame{
				{at: 10 * time.Millisecond, responses: []hubResponse{
					{&pb.WatchResponse{WatchId: 1, Created: true}, 0}, {&pb.WatchResponse{WatchId: 2, Created: true}, 0},
					{event(1, 10), ms(0)}, {event(2, 10), ms(0)}}},
				{at: time.Second, responses: []hubResponse{
					{event(1, 11), ms(990)},                           // sent at 1 s; the client blocks it for 6 s
					{event(2, 11), ms(990)},                           // 6 s late: canceled
					{event(1, 12), ms(995)},                           // 6 s late: canceled
					{&pb.WatchResponse{WatchId: 3, Created: true}, 0}, // never late
					{event(2, 12), ms(1000)}}},                        // dropped
				{at: 7 * time.Second, responses: []hubResponse{
					{event(3, 13), ms(6990)},
					{&pb.WatchResponse{WatchId: 2, Canceled: true}, 0},                     // the hub's answer: dropped
					{event(2, 13), ms(6990)},                                               // a new watch 2 (the ID is free again)
					{&pb.WatchResponse{WatchId: 1, Canceled: true, CompactRevision: 5}, 0}, // still registered
					{event(1, 13), ms(6990)},                                               // dropped
					{&pb.WatchResponse{WatchId: 1, Canceled: true}, 0}}},                   // the answer: dropped
				{at: 8 * time.Second, responses: []hubResponse{{event(1, 14), ms(7990)}}}, // a new watch 1
			},
			blocked: map[string]time.Duration{"1@11": 6 * time.Second},
			want: []string{"1 created", "2 created", "1 event@10", "2 event@10", "1 event@11",
				"2 canceled@11 " + reason, "1 canceled@12 " + reason, "3 created",
				"3 event@13", "2 event@13", "1 event@14"},
			cancels:  []int64{2, 1},
			observed: 4,
			lagSum:   0.005 + 0.005, // the quickest delivery, 5 ms quicker than the first, came in frame 2
		},
		{
			name: "the quickest delivery sets the offset",
			header: metadata.Pairs(wiremsg.RelayBatchHeader, wiremsg.RelayBatchStamped, wiremsg.RelayLagBoundHeader,
				bound.String()),
			frames: []frame{
				{at: 4 * time.Second, responses: []hubResponse{{event(1, 10), ms(0)}}},                      // 4 s late, or the hub's clock is behind
				{at: 5 * time.Second, responses: []hubResponse{{event(1, 11), ms(4500)}}},                   // the quickest: 0.5 s
				{at: 10*time.Second + time.Millisecond, responses: []hubResponse{{event(1, 12), ms(5000)}}}, // 4.5 s late: sent
				{at: 11 * time.Second, responses: []hubResponse{{event(1, 13), ms(5000)}}},                  // 5.5 s late: canceled
				{at: 12 * time.Second, responses: []hubResponse{{&pb.WatchResponse{WatchId: 1, Canceled: true}, 0}}},
			},
			want:     []string{"1 event@10", "1 event@11", "1 event@12", "1 canceled@13 " + reason},
			cancels:  []int64{1},
			observed: 3,
			lagSum:   0 + 0 + 4.501, // each of the first two was the quickest when it came
		},
		{
			name:   "a hub without stamps",
			header: metadata.Pairs(wiremsg.RelayBatchHeader, wiremsg.RelayBatchPlain),
			frames: []frame{
				{at: 0, responses: []hubResponse{{event(1, 10), 0}}},
				{at: time.Minute, responses: []hubResponse{{event(1, 11), 0}, {event(1, 12), 0}}},
			},
			blocked: map[string]time.Duration{"1@11": time.Hour},
			want:    []string{"1 event@10", "1 event@11", "1 event@12"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := &fakeHubStream{header: tc.header}
			canceled := prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
			relayLag := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})
			s := &watchServer{canceledForLag: canceled, lagWarnings: &lagWarnings{logger: slog.New(slog.DiscardHandler)},
				relayLag: relayLag}
			r := &watchRelay{server: s, upstream: &upstreamSends{ClientStream: hub}}
			var now time.Duration
			var got []string
			send := func(m any) error {
				resp, ok := m.(*pb.WatchResponse) // the relay's own, a cancel
				if !ok {
					encoded := m.(*wiremsg.Encoded)
					resp = new(pb.WatchResponse)
					if err := proto.Unmarshal(encoded.Parts.Materialize(), resp); err != nil {
						t.Fatal(err)
					}
					encoded.Parts.Free()
					encoded.Parts = nil
				}
				line := fmt.Sprint(resp.WatchId)
				switch {
				case resp.Created:
					line += " created"
				case resp.Canceled:
					line += fmt.Sprintf(" canceled@%d %s", resp.Header.GetRevision(), resp.CancelReason)
				default:
					line += fmt.Sprintf(" event@%d", resp.Header.GetRevision())
				}
				got = append(got, line)
				if len(resp.Events) > 0 {
					now += tc.blocked[fmt.Sprintf("%d@%d", resp.WatchId, resp.Header.Revision)]
				}
				return nil
			}
			r.readHeader()
			if r.lag != nil {
				r.lag.clock = func() time.Duration { return now }
			}
			for _, f := range tc.frames {
				now = max(now, f.at)
				if err := r.relay(frameOf(t, f.responses), send); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("the client got\n%q\nwant\n%q", got, tc.want)
			}
			waittest.Until(t, 5*time.Second, time.Millisecond, "the cancel requests", func() bool {
				return len(hub.canceled()) >= len(tc.cancels)
			})
			if !slices.Equal(hub.canceled(), tc.cancels) {
				t.Errorf("the hub was asked to cancel %v, want %v", hub.canceled(), tc.cancels)
			}
			if n := testutil.ToFloat64(canceled); n != float64(len(tc.cancels)) {
				t.Errorf("canceled-for-lag counter %v, want %d", n, len(tc.cancels))
			}
			var observed dto.Metric
			if err := relayLag.Write(&observed); err != nil {
				t.Fatal(err)
			}
			if n, sum := observed.Histogram.GetSampleCount(), observed.Histogram.GetSampleSum(); n != uint64(tc.observed) ||
				math.Abs(sum-tc.lagSum) > 1e-6 {
				t.Errorf("relay lag observed %d times, sum %v s; want %d, %v s", n, sum, tc.observed, tc.lagSum)
			}
			if r.lag != nil && len(r.lag.dropping) != 0 {
				t.Errorf("still dropping %v once the hub removed every watch", r.lag.dropping)
			}
		})
	}
}

// TestLagOffsetWindow: the offset estimate forgets a quick delivery after one to two windows, so that it
// follows the clocks' drift.
func TestLagOffsetWindow(t *testing.T) {
	l := newRelayLag(&watchServer{}, time.Second, nil)
	var now time.Duration
	l.clock = func() time.Duration { return now }
	l.observe(0, 0) // offset 0
	now = lagOffsetWindow / 2
	l.observe(uint64(now)-uint64(time.Second)/2, now) // a delivery 0.5 s slower
	if now += 600 * time.Millisecond; l.lagOf(uint64(lagOffsetWindow/2)-uint64(time.Second)/2) <= time.Second {
		t.Fatal("1.1 s behind the quickest delivery is not late with a 1 s bound")
	}
	now = 2*lagOffsetWindow + time.Second
	l.observe(uint64(now)-uint64(time.Second)/2, now) // the quick delivery is two windows old
	if l.lagOf(uint64(now)-uint64(time.Second)/2) > time.Second {
		t.Fatal("the estimate still holds a delivery from two windows ago")
	}
}

// gatedStream records what is sent on it, the first send waiting for open.
type gatedStream struct {
	grpc.ClientStream
	open chan struct{}
	mu   sync.Mutex
	sent []string
}

func (g *gatedStream) SendMsg(m any) error {
	req := m.(*pb.WatchRequest)
	g.mu.Lock()
	first := len(g.sent) == 0
	if c := req.GetCancelRequest(); c != nil {
		g.sent = append(g.sent, fmt.Sprint("cancel ", c.WatchId))
	} else {
		g.sent = append(g.sent, fmt.Sprint("create ", req.GetCreateRequest().GetWatchId()))
	}
	g.mu.Unlock()
	if first {
		<-g.open
	}
	return nil
}

// TestUpstreamCancelOrder: the relay queues a cancel without waiting while a client request's send is held up
// (by flow control), and a client request made after the cancel goes to the hub after it.
func TestUpstreamCancelOrder(t *testing.T) {
	g := &gatedStream{open: make(chan struct{})}
	u := &upstreamSends{ClientStream: g}
	create := func(id int64) *pb.WatchRequest {
		return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{WatchId: id}}}
	}
	held := make(chan error)
	go func() { held <- u.SendMsg(create(1)) }()
	waittest.Until(t, 5*time.Second, time.Millisecond, "the first send", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.sent) == 1
	})
	u.cancel(7) // returns although a send is held up
	after := make(chan error)
	go func() { after <- u.SendMsg(create(7)) }()
	close(g.open)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-after; err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 5*time.Second, time.Millisecond, "every send", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.sent) == 3
	})
	if want := []string{"create 1", "cancel 7", "create 7"}; !slices.Equal(g.sent, want) {
		t.Fatalf("sent %q, want %q", g.sent, want)
	}
}

// BenchmarkRelayFrame: relaying one hub frame of 100 one-event responses (one revision for a stream of 100
// watchers), with and without the lag check (a hub that stamps, one that does not). The frame is in a pooled,
// reference-counted buffer, as gRPC hands it over. The client's send takes a reference for the writer and frees
// its own, as gRPC's does, and hands each response to a goroutine that reads it and frees it as gRPC's writer
// does (a mem.Reader: Reset, Peek, Discard, Close). ns/response is the relay goroutine's time per response;
// writer-ns/response is the writer goroutine's busy time per response (gRPC's writer is one goroutine per
// client connection, so its time per response bounds what one connection carries).
func BenchmarkRelayFrame(b *testing.B) {
	for _, stamped := range []bool{false, true} {
		b.Run(fmt.Sprintf("stamped=%v", stamped), func(b *testing.B) {
			var batch wiremsg.Batch
			for id := range int64(100) {
				data, err := proto.Marshal(event(id, 10))
				if err != nil {
					b.Fatal(err)
				}
				if stamped {
					batch.Stamp(uint64(time.Hour))
				}
				batch.Add(mem.SliceBuffer(data))
			}
			frame := batch.Take().Parts.Materialize()
			header := metadata.Pairs(wiremsg.RelayBatchHeader, wiremsg.RelayBatchPlain)
			if stamped {
				header = metadata.Pairs(wiremsg.RelayBatchHeader, wiremsg.RelayBatchStamped, wiremsg.RelayLagBoundHeader, "5s")
			}
			s := &watchServer{relayLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})}
			r := &watchRelay{server: s, upstream: &upstreamSends{ClientStream: &fakeHubStream{header: header}}}
			r.readHeader()
			written := make(chan mem.BufferSlice, 1024)
			done := make(chan struct{})
			var writerBusy time.Duration
			go func() {
				defer close(done)
				var reader mem.Reader
				var pieces [][]byte
				out := make([]byte, 0, 32<<10) // the writer's buffer: gRPC copies each frame into it
				for parts := range written {
					start := time.Now()
					reader.Reset(parts)
					parts.Free()
					pieces, _ = reader.Peek(reader.Remaining(), pieces[:0])
					for _, p := range pieces {
						if len(out)+len(p) > cap(out) {
							out = out[:0]
						}
						out = append(out, p...)
					}
					_, _ = reader.Discard(reader.Remaining())
					_ = reader.Close()
					writerBusy += time.Since(start)
				}
			}()
			send := func(m any) error {
				encoded := m.(*wiremsg.Encoded)
				parts := encoded.Parts
				encoded.Parts = nil
				parts.Ref() // the writer's reference (http2Server.write)
				written <- parts
				parts.Free() // the send's own (serverStream.SendMsg)
				return nil
			}
			var pool wiremsg.Pool
			held := &wiremsg.Held{}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				buf := pool.Get(len(frame))
				copy(*buf, frame)
				held.Buf = mem.NewBuffer(buf, &pool)
				if err := r.relay(held, send); err != nil {
					b.Fatal(err)
				}
			}
			close(written)
			<-done
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/response")
			b.ReportMetric(float64(writerBusy.Nanoseconds())/float64(b.N)/100, "writer-ns/response")
		})
	}
}

// TestReadWatchFields: the relay reads a response's header, watch ID and whether the hub removed the watch
// from its encoding, past a trace carrier and events, and a cut-off response as far as it is whole.
func TestReadWatchFields(t *testing.T) {
	encode := func(r *pb.WatchResponse) []byte {
		data, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	header := &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 12, RaftTerm: 3}
	withEvents := event(7, 12)
	withEvents.Header = header
	carrier := protowire.AppendBytes(protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.BytesType), make([]byte, 25))
	for _, tc := range []struct {
		name    string
		data    []byte
		id      int64
		removed bool
		header  *pb.ResponseHeader
	}{
		{"events", encode(withEvents), 7, false, header},
		{"trace carrier first", append(carrier, encode(withEvents)...), 7, false, header},
		{"canceled", encode(&pb.WatchResponse{Header: header, WatchId: 9, Canceled: true}), 9, true, header},
		{"canceled for compaction", encode(&pb.WatchResponse{WatchId: 9, Canceled: true, CompactRevision: 4}), 9, false, nil},
		{"watch 0", encode(&pb.WatchResponse{Canceled: true}), 0, true, nil},
		{"cut in the events", encode(withEvents)[:len(encode(withEvents))-3], 7, false, header},
	} {
		f := readWatchFields(tc.data)
		got := new(pb.ResponseHeader)
		if err := proto.Unmarshal(f.header, got); err != nil {
			t.Fatalf("%s: header: %v", tc.name, err)
		}
		want := tc.header
		if want == nil {
			want = new(pb.ResponseHeader)
		}
		if f.id != tc.id || f.removed != tc.removed || !proto.Equal(got, want) {
			t.Errorf("%s: watch %d removed %v header %v; want %d, %v, %v", tc.name, f.id, f.removed, got, tc.id, tc.removed, want)
		}
	}
}

// TestRelayCountsWriteWait: while frames it relayed are unwritten, the relay counts how long gRPC took to write
// its last frame to the client, from the end of the frame's relay to its last response freed, into the lag of
// what it sends next: a response that would be written past the bound is not sent, though it is within the
// bound when relayed. With everything written, a response waits behind nothing.
func TestRelayCountsWriteWait(t *testing.T) {
	const bound = 5 * time.Second
	const hubEpoch = uint64(1e15)
	ms := func(n int) uint64 { return hubEpoch + uint64(n)*uint64(time.Millisecond) }
	hub := &fakeHubStream{header: metadata.Pairs(wiremsg.RelayBatchHeader, wiremsg.RelayBatchStamped,
		wiremsg.RelayLagBoundHeader, bound.String())}
	relayLag := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: []float64{1, 5}})
	s := &watchServer{canceledForLag: prometheus.NewCounter(prometheus.CounterOpts{Name: "c"}),
		lagWarnings: &lagWarnings{logger: slog.New(slog.DiscardHandler)}, relayLag: relayLag}
	r := &watchRelay{server: s, upstream: &upstreamSends{ClientStream: hub}}
	r.readHeader()
	var now time.Duration
	r.lag.clock = func() time.Duration { return now }
	var pool wiremsg.Pool
	counted := func(responses []hubResponse) *wiremsg.Held { // in a pooled buffer, as gRPC hands a frame over
		data := frameOf(t, responses).Buf.ReadOnlyData()
		buf := pool.Get(16 << 10)
		*buf = append((*buf)[:0], data...)
		return &wiremsg.Held{Buf: mem.NewBuffer(buf, &pool)}
	}
	var unwritten mem.BufferSlice // what gRPC has not written yet
	var got []string
	send := func(m any) error {
		resp, ok := m.(*pb.WatchResponse)
		if !ok {
			encoded := m.(*wiremsg.Encoded)
			resp = new(pb.WatchResponse)
			if err := proto.Unmarshal(encoded.Parts.Materialize(), resp); err != nil {
				t.Fatal(err)
			}
			unwritten = append(unwritten, encoded.Parts...)
			encoded.Parts = nil
		}
		got = append(got, fmt.Sprintf("%d canceled %v", resp.WatchId, resp.Canceled))
		return nil
	}
	if err := r.relay(counted([]hubResponse{{event(1, 10), ms(0)}, {event(2, 10), ms(0)}}), send); err != nil {
		t.Fatal(err)
	}
	// the client drains slowly: the frame is written 3 s after its relay, and a frame is still unwritten
	if err := r.relay(counted([]hubResponse{{&pb.WatchResponse{WatchId: 3, Created: true}, 0}}), send); err != nil {
		t.Fatal(err)
	}
	stillOut := unwritten[len(unwritten)-1]
	now = 3 * time.Second
	unwritten[:len(unwritten)-1].Free()
	unwritten = nil
	if wait := time.Duration(r.lag.writeWait.Load()); wait < 3*time.Second-time.Millisecond || wait > 3*time.Second {
		t.Fatalf("write wait %v, want 3 s", wait)
	}
	// 0.5 s and 2.5 s behind when relayed: 3.5 s and 5.5 s when written
	if err := r.relay(counted([]hubResponse{{event(1, 11), ms(2500)}, {event(2, 11), ms(500)}}), send); err != nil {
		t.Fatal(err)
	}
	if want := []string{"1 canceled false", "2 canceled false", "3 canceled false", "1 canceled false",
		"2 canceled true"}; !slices.Equal(got, want) {
		t.Fatalf("the client got %q, want %q", got, want)
	}
	// Everything written: 2.5 s behind is 2.5 s, whatever the last frame waited.
	stillOut.Free()
	unwritten.Free()
	unwritten, got = nil, nil
	if err := r.relay(counted([]hubResponse{{event(1, 12), ms(500)}}), send); err != nil {
		t.Fatal(err)
	}
	if want := []string{"1 canceled false"}; !slices.Equal(got, want) {
		t.Fatalf("with nothing unwritten the client got %q, want %q", got, want)
	}
	var observed dto.Metric
	if err := relayLag.Write(&observed); err != nil {
		t.Fatal(err)
	}
	if n, sum := observed.Histogram.GetSampleCount(), observed.Histogram.GetSampleSum(); n != 3 || math.Abs(sum-6) > 1e-3 {
		t.Errorf("relay lag observed %d times, sum %v s; want 3, 6 s (0, then 0.5 + 3, then 2.5)", n, sum)
	}
	unwritten.Free()
}

// TestRelayAcknowledgesWrittenFrames: to a hub that waits for acknowledgments, the relay sends the number of
// frames whose responses gRPC has all written (freed), at every wiremsg.RelayAckEvery-th; to one that does not,
// nothing.
func TestRelayAcknowledgesWrittenFrames(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions []string
		acks     bool
	}{
		{"acknowledged", []string{wiremsg.RelayBatchStamped, wiremsg.RelayBatchAcked}, true},
		{"stamped only", []string{wiremsg.RelayBatchStamped}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			header := metadata.Pairs(wiremsg.RelayLagBoundHeader, "5s")
			for _, v := range tc.versions {
				header.Append(wiremsg.RelayBatchHeader, v)
			}
			hub := &fakeHubStream{header: header}
			s := &watchServer{canceledForLag: prometheus.NewCounter(prometheus.CounterOpts{Name: "c"}),
				lagWarnings: &lagWarnings{logger: slog.New(slog.DiscardHandler)},
				relayLag:    prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})}
			r := &watchRelay{server: s, upstream: &upstreamSends{ClientStream: hub}}
			var pool wiremsg.Pool
			var frames []mem.BufferSlice // each frame's responses, unwritten
			send := func(m any) error {
				encoded := m.(*wiremsg.Encoded)
				frames[len(frames)-1] = append(frames[len(frames)-1], encoded.Parts...)
				encoded.Parts = nil
				return nil
			}
			for i := range 2 * wiremsg.RelayAckEvery {
				data := frameOf(t, []hubResponse{{event(1, int64(10+i)), 1}, {event(2, int64(10+i)), 1}}).Buf.ReadOnlyData()
				buf := pool.Get(16 << 10)
				*buf = append((*buf)[:0], data...)
				frames = append(frames, nil)
				if err := r.relay(&wiremsg.Held{Buf: mem.NewBuffer(buf, &pool)}, send); err != nil {
					t.Fatal(err)
				}
			}
			if got := hub.acked(); len(got) != 0 {
				t.Fatalf("acknowledged %v with nothing written", got)
			}
			var want []uint64
			for i := range frames {
				frames[i].Free()
				if n := uint64(i + 1); tc.acks && n%wiremsg.RelayAckEvery == 0 {
					want = append(want, n)
					waittest.Until(t, 5*time.Second, time.Millisecond, fmt.Sprintf("an acknowledgment of %d", n), func() bool {
						return slices.Equal(hub.acked(), want)
					})
				}
				time.Sleep(20 * time.Millisecond) // a stray acknowledgment would come by now
				if got := hub.acked(); !slices.Equal(got, want) {
					t.Fatalf("after %d frames written: acknowledgments %v, want %v", i+1, got, want)
				}
			}
		})
	}
}
