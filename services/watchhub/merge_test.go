package watchhub

import (
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

func TestMergeRuns(t *testing.T) {
	plain := &watcher{id: 1}
	other := &watcher{id: 2}
	fragmenting := &watcher{id: 3, spec: watchSpec{fragment: true}}
	live := func(w *watcher, bytes int) frame {
		return frame{w: w, shared: &sharedResponse{boxed: make([]mem.Buffer, 1), bytes: bytes}}
	}
	progress := func(w *watcher) frame { return frame{w: w, ctl: &controlFrame{resp: &pb.WatchResponse{}}} }
	repeat := func(n int, f func() frame) []frame {
		frames := make([]frame, n)
		for i := range frames {
			frames[i] = f()
		}
		return frames
	}
	var pool chunkPool
	var m runMerger // one sender's, across the cases: as a stream's sender merges again and again
	for _, tc := range []struct {
		name     string
		frames   []frame
		maxBytes int
		// heads maps each frame written to the number of responses it carries; merged frames are absent.
		want map[int]int
	}{
		{"one watcher's run merges", []frame{live(plain, 10), live(plain, 10), live(plain, 10)}, 100,
			map[int]int{0: 3}},
		{"watchers interleaved merge apart", []frame{live(plain, 10), live(other, 10), live(plain, 10), live(other, 10)}, 100,
			map[int]int{0: 2, 1: 2}},
		{"the watcher's own control frame ends its run", []frame{live(plain, 10), progress(plain), live(plain, 10)}, 100,
			map[int]int{0: 1, 1: 1, 2: 1}},
		{"another watcher's control frame does not", []frame{live(plain, 10), progress(other), live(plain, 10)}, 100,
			map[int]int{0: 2, 1: 1}},
		{"a stream-wide frame ends every run", []frame{live(plain, 10), progress(nil), live(plain, 10)}, 100,
			map[int]int{0: 1, 1: 1, 2: 1}},
		{"fragmenting watchers never merge", []frame{live(fragmenting, 10), live(fragmenting, 10)}, 100,
			map[int]int{0: 1, 1: 1}},
		{"a run stops at the byte limit", []frame{live(plain, 40), live(plain, 40), live(plain, 40)}, 100,
			map[int]int{0: 2, 2: 1}},
		{"two responses over the limit never merge", []frame{live(plain, 60), live(plain, 60)}, 100,
			map[int]int{0: 1, 1: 1}},
		{"a run left open by the last call does not carry over", []frame{live(plain, 10), live(plain, 10)}, 100,
			map[int]int{0: 2}},
		{"nor one ended by a watcher's control frame", []frame{live(other, 10), progress(other), progress(plain),
			live(other, 10)}, 100, map[int]int{0: 1, 1: 1, 2: 1, 3: 1}},
		{"a run goes on across chunks", repeat(outboxChunkFrames+44, func() frame { return live(plain, 1) }), 1 << 20,
			map[int]int{0: outboxChunkFrames + 44}},
		{"and stops at etcd's revisions per response", repeat(mergeMaxResponses+5, func() frame { return live(plain, 1) }),
			1 << 20, map[int]int{0: mergeMaxResponses, mergeMaxResponses: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o outbox
			for _, f := range tc.frames {
				o.push(f, &pool)
			}
			m.mergeRuns(&o, tc.maxBytes)
			got := map[int]int{}
			frames := outboxFrames(&o)
			for i, f := range frames {
				if f.merged {
					continue
				}
				more := m.more(&f)
				got[i] = 1 + len(more)
				// What merged into f is its watcher's next live responses, in order.
				next := i + 1
				for k, resp := range more {
					for next < len(frames) && frames[next].w != f.w {
						next++
					}
					if next == len(frames) || frames[next].shared != resp || !frames[next].merged {
						t.Fatalf("frame %d: merged response %d is not its watcher's next frame", i, k)
					}
					next++
				}
			}
			m.reset()
			o.release(&pool)
			if len(got) != len(tc.want) {
				t.Fatalf("written frames %v, want %v", got, tc.want)
			}
			for i, n := range tc.want {
				if got[i] != n {
					t.Fatalf("written frames %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestMergedResponseDecodes checks that a merged response is, to a client, one WatchResponse with the
// watcher's ID, every event in revision order and the last response's header.
func TestMergedResponseDecodes(t *testing.T) {
	event := func(rev int64) []*mvccpb.Event {
		return []*mvccpb.Event{{Kv: &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v"), ModRevision: rev}}}
	}
	var shared []*sharedResponse
	for rev := int64(10); rev < 13; rev++ {
		r, err := encodeShared(&pb.ResponseHeader{ClusterId: 7, MemberId: 8, Revision: rev, RaftTerm: 2}, event(rev), 0)
		if err != nil {
			t.Fatal(err)
		}
		shared = append(shared, r)
	}
	for _, id := range []int64{0, 5} {
		wire, err := newCodec().Marshal(&encodedResponse{watchID: newWatchIDField(id), part: shared[0].boxed[0],
			more: shared[1:]})
		if err != nil {
			t.Fatal(err)
		}
		var got pb.WatchResponse
		if err := proto.Unmarshal(wire.Materialize(), &got); err != nil {
			t.Fatal(err)
		}
		var revs []int64
		for _, ev := range got.Events {
			revs = append(revs, ev.Kv.ModRevision)
		}
		want := &pb.ResponseHeader{ClusterId: 7, MemberId: 8, Revision: 12, RaftTerm: 2}
		if got.WatchId != id || !slices.Equal(revs, []int64{10, 11, 12}) || !proto.Equal(got.Header, want) {
			t.Fatalf("watch ID %d: decoded %v", id, &got)
		}
	}
}
