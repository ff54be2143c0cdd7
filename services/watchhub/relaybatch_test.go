package watchhub

import (
	"bytes"
	"context"
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

	type frame struct {
		responses []*pb.WatchResponse
		bytes     int
	}
	open := func(ask bool) (grpc.ClientStream, <-chan frame, func() metadata.MD) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		if ask {
			ctx = metadata.AppendToOutgoingContext(ctx, wiremsg.RelayBatchHeader, "1")
		}
		stream, err := conn.NewStream(ctx, &pb.Watch_ServiceDesc.Streams[0], pb.Watch_Watch_FullMethodName,
			grpc.ForceCodecV2(wiremsg.NewCodec()))
		if err != nil {
			t.Fatal(err)
		}
		frames := make(chan frame, 1<<12)
		go func() {
			defer close(frames)
			for {
				var raw wiremsg.Raw
				if err := stream.RecvMsg(&raw); err != nil {
					return
				}
				header, _ := stream.Header()
				f := frame{bytes: len(raw.Data)}
				each := func(msg []byte) error {
					resp := new(pb.WatchResponse)
					if err := proto.Unmarshal(msg, resp); err != nil {
						return err
					}
					f.responses = append(f.responses, resp)
					return nil
				}
				if wiremsg.RelayBatchPromised(header) {
					if err := wiremsg.SplitBatch(raw.Data, each); err != nil {
						t.Errorf("frame: %v", err)
						return
					}
				} else if err := each(raw.Data); err != nil {
					t.Errorf("frame: %v", err)
					return
				}
				frames <- f
			}
		}()
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
	collect := func(frames <-chan frame, wantEvents, wantCreated int) (all []*pb.WatchResponse, most int) {
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
	waitCreated := func(frames <-chan frame) []*pb.WatchResponse {
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
// a random order, go into batches of at most relayBatchBytes (one over it only alone), each as full as the
// next response allows, and all of them are sent.
func TestRelayBatchesStayWithinTheLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var responses []int
	for range 2000 {
		responses = append(responses, 1+rng.IntN(3000))
	}
	responses = append(responses, relayBatchBytes+100, 5, relayBatchBytes-4, 4<<10, 7)
	rec := &batchRecorder{}
	s := &stream{srv: rec, batch: &wiremsg.Batch{Pool: new(wiremsg.Pool)}}
	// entry is a response's size in a batch: its tag and length prefix, then its bytes
	entry := func(n int) int { return protowire.SizeTag(1) + protowire.SizeBytes(n) }
	var want []int // the batches, as the responses fill them
	for _, n := range responses {
		if len(want) == 0 || want[len(want)-1]+entry(n) > relayBatchBytes {
			want = append(want, 0)
		}
		want[len(want)-1] += entry(n)
		if err := s.addToBatch(mem.SliceBuffer(bytes.Repeat([]byte{'x'}, n))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.sendBatch(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.sizes, want) {
		t.Fatalf("batches of %v bytes; want %v", rec.sizes, want)
	}
	for i, size := range rec.sizes {
		if size > relayBatchBytes && size != entry(relayBatchBytes+100) {
			t.Errorf("batch %d: %d bytes, over the limit %d", i, size, relayBatchBytes)
		}
	}
}
