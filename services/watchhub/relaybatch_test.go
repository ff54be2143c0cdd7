package watchhub

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// TestRelayBatches: a stream whose peer asks for relay batches is promised them in the response header, and
// its frames carry the responses a plain stream gets, in the same order, several to a frame once many
// watchers share a revision, each frame at most relayBatchBytes (a revision's responses here take two); a
// stream that does not ask gets one response per frame.
func TestRelayBatches(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{})
	conn := dialHub(t, h.Addr())
	const watchers = 50
	const puts = 5

	open := func(ask bool) (grpc.ClientStream, <-chan rawFrame, func() metadata.MD) {
		version := ""
		if ask {
			version = wiremsg.RelayBatchPlain
		}
		stream := openRawWatch(t, conn, version)
		frames := readFrames(t, stream, 1<<12)
		return stream, frames, func() metadata.MD { md, _ := stream.Header(); return md }
	}

	plain, plainFrames, plainHeader := open(false)
	batched, batchedFrames, batchedHeader := open(true)
	for _, s := range []grpc.ClientStream{plain, batched} {
		for i := range watchers {
			req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
				Key: []byte("k"), WatchId: int64(i + 1)}}}
			if err := s.SendMsg(req); err != nil {
				t.Fatal(err)
			}
		}
	}
	// the stream's responses until wantEvents events and wantCreated created, with the most a frame carried
	// and the largest frame's bytes
	largest := 0
	collect := func(frames <-chan rawFrame, wantEvents, wantCreated int) (all []*pb.WatchResponse, most int) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		events, created := 0, 0
		for events < wantEvents || created < wantCreated {
			select {
			case f, ok := <-frames:
				if !ok {
					t.Fatalf("stream ended after %d events", events)
				}
				most = max(most, len(f.responses))
				largest = max(largest, f.bytes)
				for _, r := range f.responses {
					all = append(all, r)
					events += len(r.Events)
					if r.Created {
						created++
					}
				}
			case <-deadline:
				t.Fatalf("%d of %d events, %d of %d created within 20 s", events, wantEvents, created, wantCreated)
			}
		}
		return all, most
	}
	// the creates first, so that both streams see every put
	waitCreated := func(frames <-chan rawFrame) []*pb.WatchResponse {
		all, _ := collect(frames, 0, watchers)
		return all
	}
	plainAll, batchedAll := waitCreated(plainFrames), waitCreated(batchedFrames)
	for i := range puts {
		env.put("k", strings.Repeat(string(rune('a'+i)), 400)) // 50 responses of over 400 bytes: two batches
	}
	more, plainMost := collect(plainFrames, watchers*puts, 0)
	plainAll = append(plainAll, more...)
	largest = 0
	more, batchedMost := collect(batchedFrames, watchers*puts, 0)
	batchedAll = append(batchedAll, more...)
	if largest > relayBatchBytes {
		t.Errorf("largest batch %d bytes; want at most %d", largest, relayBatchBytes)
	}

	if wiremsg.RelayBatchPromised(plainHeader()) || !wiremsg.RelayBatchPromised(batchedHeader()) {
		t.Fatalf("promised batches: plain stream %v, asking stream %v; want false, true",
			wiremsg.RelayBatchPromised(plainHeader()), wiremsg.RelayBatchPromised(batchedHeader()))
	}
	if plainMost != 1 || batchedMost < 2 {
		t.Errorf("most responses in a frame: plain %d, batched %d; want 1 and more than 1", plainMost, batchedMost)
	}
	// per watcher, the same events in the same order (how a watcher's revisions are merged into responses
	// depends on timing, so events are compared, not response boundaries)
	flatten := func(all []*pb.WatchResponse) map[int64][]string {
		out := map[int64][]string{}
		for _, r := range all {
			if r.Created {
				out[r.WatchId] = append(out[r.WatchId], "created")
			}
			for _, ev := range r.Events {
				out[r.WatchId] = append(out[r.WatchId], ev.Kv.String())
			}
		}
		return out
	}
	plainBy, batchedBy := flatten(plainAll), flatten(batchedAll)
	if len(plainBy) != watchers || len(batchedBy) != watchers {
		t.Fatalf("watchers answered: plain %d, batched %d; want %d", len(plainBy), len(batchedBy), watchers)
	}
	for id, want := range plainBy {
		got := batchedBy[id]
		if len(got) != len(want) || len(want) != puts+1 {
			t.Fatalf("watch %d: batched %q, plain %q", id, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("watch %d: batched %q, plain %q", id, got, want)
			}
		}
	}
}

// batchRecorder is a Watch server stream that keeps the size of every message sent on it.
type batchRecorder struct {
	pb.Watch_WatchServer
	sizes []int
}

func (r *batchRecorder) SendMsg(m any) error {
	wire, err := newCodec().Marshal(m)
	if err != nil {
		return err
	}
	r.sizes = append(r.sizes, wire.Len())
	wire.Free()
	return nil
}

// TestRelayBatchesStayWithinTheLimit: responses of every size from a few bytes to past the batch limit, in
// a random order, go into batches of at most relayBatchBytes (one over it only alone, with its stamp), each as
// full as the next response allows, and all of them are sent; with lag stamps (a new one every third response,
// and again at the start of each batch) counted in.
func TestRelayBatchesStayWithinTheLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var responses []int
	for range 2000 {
		responses = append(responses, 1+rng.IntN(3000))
	}
	responses = append(responses, relayBatchBytes+100, 5, relayBatchBytes-4, 4<<10, 7)
	for _, stamps := range []bool{false, true} {
		rec := &batchRecorder{}
		s := &stream{srv: rec, batch: &wiremsg.Batch{Pool: new(wiremsg.Pool)}, stamps: stamps}
		// entry is a response's size in a batch: its stamp if it needs one, its tag and length prefix, then
		// its bytes
		var written uint64
		entry := func(n int, stamp uint64) int {
			size := protowire.SizeTag(1) + protowire.SizeBytes(n)
			if stamps && stamp != written {
				size += protowire.SizeTag(2) + protowire.SizeVarint(stamp)
			}
			return size
		}
		var want, count []int // the batches, as the responses fill them, and their responses
		for i, n := range responses {
			stamp := uint64(1e12 + i/3)
			if len(want) == 0 || want[len(want)-1]+entry(n, stamp) > relayBatchBytes {
				want, count, written = append(want, 0), append(count, 0), 0
			}
			want[len(want)-1] += entry(n, stamp)
			count[len(count)-1]++
			written = stamp
			if err := s.addToBatch(stamp, mem.SliceBuffer(bytes.Repeat([]byte{'x'}, n))); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.sendBatch(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rec.sizes, want) {
			t.Fatalf("stamps %v: batches of %v bytes; want %v", stamps, rec.sizes, want)
		}
		for i, size := range rec.sizes {
			if size > relayBatchBytes && count[i] != 1 {
				t.Errorf("stamps %v: batch %d: %d bytes, over the limit %d", stamps, i, size, relayBatchBytes)
			}
		}
	}
}

// TestRelayStamps: a stream whose peer asks for stamped batches is promised them with the hub's lag bound, and
// every event response is stamped with when its watcher's lag started on the hub's clock: a live one with
// its revision's arrival, in order, a catch-up one of a watch created later with the watch's creation; a
// created response is not stamped. A plain batch stream gets no stamps.
func TestRelayStamps(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{MaxWatchLag: 3 * time.Second})
	conn := dialHub(t, h.Addr())
	type stamped struct {
		resp  *pb.WatchResponse
		stamp uint64
	}
	open := func(version string) (grpc.ClientStream, <-chan stamped) {
		stream := openRawWatch(t, conn, version)
		frames := readFrames(t, stream, 64)
		out := make(chan stamped, 64)
		go func() {
			defer close(out)
			for f := range frames {
				for i, resp := range f.responses {
					out <- stamped{resp, f.stamps[i]}
				}
			}
		}()
		return stream, out
	}
	next := func(from <-chan stamped) stamped {
		t.Helper()
		return recvWithin(t, from, "response")
	}
	create := func(s grpc.ClientStream, id, start int64) {
		t.Helper()
		req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			Key: []byte("k"), WatchId: id, StartRevision: start}}}
		if err := s.SendMsg(req); err != nil {
			t.Fatal(err)
		}
	}
	stampedStream, stamps := open(wiremsg.RelayBatchStamped)
	plainStream, plain := open(wiremsg.RelayBatchPlain)
	create(stampedStream, 1, 0)
	create(plainStream, 1, 0)
	for _, r := range []stamped{next(stamps), next(plain)} {
		if !r.resp.Created || r.stamp != 0 {
			t.Fatalf("first response %v stamped %d, want created and no stamp", r.resp, r.stamp)
		}
	}
	if header, _ := stampedStream.Header(); true {
		if bound, ok := wiremsg.RelayStampsPromised(header); !ok || bound != 3*time.Second {
			t.Fatalf("header %v promises stamps %v with bound %v; want 3s", header, ok, bound)
		}
	}
	if header, _ := plainStream.Header(); wiremsg.RelayBatchPromised(header) == false {
		t.Fatalf("plain stream header %v promises no batches", header)
	} else if _, ok := wiremsg.RelayStampsPromised(header); ok {
		t.Fatalf("plain stream header %v promises stamps", header)
	}
	before := uint64(h.clock())
	first := env.put("k", "a")
	env.put("k", "b")
	var live []uint64
	for len(live) < 2 {
		r := next(stamps)
		for range r.resp.Events {
			live = append(live, r.stamp)
		}
	}
	after := uint64(h.clock())
	if live[0] < before || live[1] < live[0] || live[1] > after {
		t.Fatalf("live stamps %v, want in order between %d and %d", live, before, after)
	}
	for n := 0; n < 2; {
		if r := next(plain); r.stamp != 0 {
			t.Fatalf("plain batch response stamped %d", r.stamp)
		} else {
			n += len(r.resp.Events)
		}
	}
	created := uint64(h.clock())
	create(stampedStream, 2, first)
	if r := next(stamps); !r.resp.Created || r.stamp != 0 {
		t.Fatalf("response %v stamped %d, want created and no stamp", r.resp, r.stamp)
	}
	r := next(stamps)
	if r.resp.WatchId != 2 || len(r.resp.Events) != 2 || r.stamp < created || r.stamp > uint64(h.clock()) {
		t.Fatalf("catch-up response %v stamped %d; want watch 2's two events stamped at its creation, after %d",
			r.resp, r.stamp, created)
	}
}

// rawFrame is one frame of a raw Watch stream: its responses, their stamps (0 for none), and its size.
type rawFrame struct {
	responses []*pb.WatchResponse
	stamps    []uint64
	bytes     int
}

// readFrames reads stream's frames until it ends, into a channel of the given capacity: split into their
// responses if the hub promised batches, else each one response.
func readFrames(t *testing.T, stream grpc.ClientStream, capacity int) <-chan rawFrame {
	frames := make(chan rawFrame, capacity)
	go func() {
		defer close(frames)
		for {
			var raw wiremsg.Raw
			if err := stream.RecvMsg(&raw); err != nil {
				return
			}
			header, _ := stream.Header()
			f := rawFrame{bytes: len(raw.Data)}
			each := func(msg []byte, stamp uint64) error {
				resp := new(pb.WatchResponse)
				if err := proto.Unmarshal(msg, resp); err != nil {
					return err
				}
				f.responses, f.stamps = append(f.responses, resp), append(f.stamps, stamp)
				return nil
			}
			var err error
			if wiremsg.RelayBatchPromised(header) {
				err = wiremsg.SplitBatch(raw.Data, each)
			} else {
				err = each(raw.Data, 0)
			}
			if err != nil {
				t.Errorf("frame: %v", err)
				return
			}
			frames <- f
		}
	}()
	return frames
}

// recvWithin receives what comes next from a stream's reader goroutine (what names it), failing the test if the
// stream ended or nothing came within 10 s.
func recvWithin[T any](t *testing.T, from <-chan T, what string) T {
	t.Helper()
	select {
	case v, ok := <-from:
		if !ok {
			t.Fatal("stream ended")
		}
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
	}
	var zero T
	return zero
}

// openRawWatch opens a Watch stream on conn that receives frames undecoded (wiremsg.Raw), asking for relay
// batches of the given versions ("" asks for none); it ends with the test.
func openRawWatch(t *testing.T, conn *grpc.ClientConn, versions ...string) grpc.ClientStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, version := range versions {
		if version != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, wiremsg.RelayBatchHeader, version)
		}
	}
	stream, err := conn.NewStream(ctx, &pb.Watch_ServiceDesc.Streams[0], pb.Watch_Watch_FullMethodName,
		grpc.ForceCodecV2(wiremsg.NewCodec()))
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// TestRelayAcks: a hub whose frontend acknowledges batches sends only a few it has not had acknowledged, and
// keeps the rest: with nothing acknowledged, two frames come of 40 puts of 4 KiB (14 frames' worth), and
// each acknowledgment lets more come, until every event has come, in order. A burst of creates beyond its
// control slots, sent while it waits, does not hold up the acknowledgments sent after them.
func TestRelayAcks(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{})
	conn := dialHub(t, h.Addr())
	stream := openRawWatch(t, conn, wiremsg.RelayBatchStamped, wiremsg.RelayBatchAcked)
	frames := readFrames(t, stream, 256)
	next := func() []*pb.WatchResponse {
		t.Helper()
		return recvWithin(t, frames, "frame").responses
	}
	none := func() {
		t.Helper()
		select {
		case f := <-frames:
			t.Fatalf("a frame of %d responses came with the unacknowledged limit reached", len(f.responses))
		case <-time.After(300 * time.Millisecond):
		}
	}
	send := func(m any) {
		t.Helper()
		if err := stream.SendMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}})
	if f := next(); len(f) != 1 || !f[0].Created {
		t.Fatalf("first frame %v, want created", f)
	}
	if header, _ := stream.Header(); !wiremsg.RelayAcksPromised(header) {
		t.Fatalf("header %v promises no acknowledgments", header)
	}
	var revs []int64
	for i := range 40 {
		revs = append(revs, env.put("k", strings.Repeat(string(rune('a'+i%26)), 4<<10)))
	}
	received, sent := 1, uint64(1) // the created response's frame is sent and not acknowledged
	var got []int64
	take := func(f []*pb.WatchResponse) {
		for _, r := range f {
			for _, ev := range r.Events {
				got = append(got, ev.Kv.ModRevision)
			}
		}
	}
	for uint64(received) < relayFlowMinBatches {
		take(next())
		received++
	}
	none()
	for len(got) < len(revs) {
		sent = uint64(received)
		send(wiremsg.RelayAck(sent))
		take(next())
		received++
	}
	if !slices.Equal(got, revs) {
		t.Fatalf("events at %v, want %v", got, revs)
	}

	// A burst of creates while the sender waits for acknowledgments: the handler waits for control slots,
	// which the sender frees as it writes, and the reader for the handler, so acknowledgments sent after the
	// creates could not be read; the reader, once it waits, lets the sender go past the limit.
	var more []int64
	for range 20 {
		more = append(more, env.put("k", strings.Repeat("m", 4<<10)))
	}
	for i := range 200 {
		send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			Key: []byte(fmt.Sprintf("c%d", i))}}})
	}
	got = got[:0]
	for created := 0; created < 200 || len(got) < len(more); {
		f := next()
		received++
		take(f)
		for _, r := range f {
			if r.Created {
				created++
			}
		}
		send(wiremsg.RelayAck(uint64(received)))
	}
	if !slices.Equal(got, more) {
		t.Fatalf("events at %v, want %v", got, more)
	}
}

// TestRelayWaitsBeforeTaking: a sender held to acknowledgments waits before it takes its queue, not after, so
// what comes while it waits stays queued and goes out merged, one response per watcher, rather than partly
// in a batch it took and wrote before it found it could not send it. Puts come one at a time, each reaching
// the hub before the next, and are small, so that no batch fills and the sender sends one only when it has
// written everything it took.
func TestRelayWaitsBeforeTaking(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{})
	stream := openRawWatch(t, dialHub(t, h.Addr()), wiremsg.RelayBatchStamped, wiremsg.RelayBatchAcked)
	frames := readFrames(t, stream, 64)
	if err := stream.SendMsg(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
		CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}}); err != nil {
		t.Fatal(err)
	}
	if f := recvWithin(t, frames, "created").responses; len(f) != 1 || !f[0].Created {
		t.Fatalf("first frame %v, want created", f)
	}
	var revs, got []int64
	for i := range 20 {
		revs = append(revs, env.put("k", fmt.Sprintf("v%d", i)))
		for deadline := time.Now().Add(10 * time.Second); h.headRev.Load() < revs[i]; time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("hub at revision %d, want %d", h.headRev.Load(), revs[i])
			}
		}
	}
	// The created response's frame and one more are all that may be unacknowledged.
	for _, r := range recvWithin(t, frames, "second frame").responses {
		for _, ev := range r.Events {
			got = append(got, ev.Kv.ModRevision)
		}
	}
	select {
	case f := <-frames:
		t.Fatalf("a third frame of %d responses came with nothing acknowledged", len(f.responses))
	case <-time.After(200 * time.Millisecond):
	}
	if err := stream.SendMsg(wiremsg.RelayAck(relayFlowMinBatches)); err != nil {
		t.Fatal(err)
	}
	rest := recvWithin(t, frames, "frame after the acknowledgment").responses
	if len(rest) != 1 {
		t.Fatalf("the events queued while the sender waited came in %d responses, want 1 (merged)", len(rest))
	}
	for _, ev := range rest[0].Events {
		got = append(got, ev.Kv.ModRevision)
	}
	if !slices.Equal(got, revs) {
		t.Fatalf("events at %v, want %v", got, revs)
	}
}
