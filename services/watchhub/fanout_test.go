package watchhub

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// newDispatchHub is a hub that is never started, with shards fan-out shards dispatched in parallel from
// minParallel deliveries, for tests that call deliver directly.
func newDispatchHub(t testing.TB, shards, minParallel int, cfg Config) *Hub {
	t.Helper()
	cfg.ListenURL, cfg.NATSURL = "http://127.0.0.1:0", "nats://127.0.0.1:1"
	cfg.StorageEndpoints = []string{"http://127.0.0.1:1"}
	h, err := New(cfg, Deps{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.pool.Close() })
	setFanOut(h, shards, minParallel)
	h.win = newWindow(1, h.cfg.WindowRevisions, h.cfg.WindowBytes)
	return h
}

// setFanOut splits h's fan-out in shards, dispatched in parallel from minParallel deliveries; h has no
// watchers yet.
func setFanOut(h *Hub, shards, minParallel int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.groups = newGroupIndex(shards)
	h.fan = newFanOutShards(shards)
	h.fan.minParallel = minParallel
}

// frameRevision is the revision a live frame carries (its header's).
func frameRevision(t *testing.T, f frame) int64 {
	t.Helper()
	var resp pb.WatchResponse
	if err := proto.Unmarshal(f.shared.parts[0], &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// TestDispatchKeepsEachWatchersOrder: however the streams are sharded and whether the shards run in
// parallel, every watcher's frames are its live revisions in order from its first, and a watcher whose stream
// is full gets nothing after the revision it missed but one catch-up frame from it.
func TestDispatchKeepsEachWatchersOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		shards, minParallel int
		streams, perStream  int
		runs, revsPerRun    int
		bufferResponses     int // WatcherBufferResponses: smaller than the revisions, so watchers fall behind
	}{
		{"one shard", 1, 0, 5, 3, 4, 3, 1000},
		{"serial shards", 3, 1 << 30, 7, 4, 3, 5, 1000},
		{"parallel shards", 4, 0, 9, 5, 5, 4, 1000},
		{"more shards than streams", 8, 0, 3, 10, 2, 6, 1000},
		{"parallel, watchers fall behind", 4, 0, 8, 6, 3, 4, 5},
		{"serial, watchers fall behind", 2, 1 << 30, 8, 6, 3, 4, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newDispatchHub(t, tc.shards, tc.minParallel, Config{WatcherBufferResponses: tc.bufferResponses})
			var watchers []*watcher
			h.mu.Lock()
			for i := range tc.streams {
				s := &stream{hub: h, shard: i, watchers: map[int64]*watcher{}, wake: make(chan struct{}, 1)}
				for id := range tc.perStream {
					// Half the watchers want the key, a quarter its prefix, a quarter with prev_kv.
					req := &pb.WatchCreateRequest{Key: []byte("k")}
					switch id % 4 {
					case 1:
						req.RangeEnd = []byte("l")
					case 2:
						req.PrevKv = true
					}
					spec, err := specFromRequest(req)
					if err != nil {
						t.Fatal(err)
					}
					w := &watcher{id: int64(id), stream: s, spec: spec, minRev: 2 + int64(id%3)}
					s.watchers[w.id] = w
					h.groups.join(w)
					h.setState(w, stateSynced)
					watchers = append(watchers, w)
				}
			}
			h.mu.Unlock()
			rev := int64(2)
			for range tc.runs {
				var run []revisionEvents
				for range tc.revsPerRun {
					ev := &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v"), ModRevision: rev}}
					run = append(run, newRevisionEvents(rev, []*mvccpb.Event{ev}, nil, time.Now()))
					rev++
				}
				h.deliver(run)
			}
			for _, w := range watchers {
				next, behind := w.minRev, false
				for _, f := range outboxFrames(&w.stream.outbox) {
					if f.w != w {
						continue
					}
					switch {
					case behind:
						t.Fatalf("watcher %d/%d: a frame after its catch-up frame", w.stream.shard, w.id)
					case f.ctl != nil && f.ctl.catchUpFrom > 0:
						if f.ctl.catchUpFrom != next {
							t.Fatalf("watcher %d/%d catches up from %d, want %d", w.stream.shard, w.id, f.ctl.catchUpFrom, next)
						}
						behind = true
					default:
						if got := frameRevision(t, f); got != next {
							t.Fatalf("watcher %d/%d got revision %d, want %d", w.stream.shard, w.id, got, next)
						}
						next++
					}
				}
				if !behind && next != rev {
					t.Fatalf("watcher %d/%d got revisions up to %d, want %d", w.stream.shard, w.id, next-1, rev-1)
				}
				if behind != (w.state == stateCatchingUp) || behind == (w.group != nil) || w.behindFrom != 0 {
					t.Fatalf("watcher %d/%d: behind %v, state %v, in a group %v, behindFrom %d", w.stream.shard, w.id,
						behind, w.state, w.group != nil, w.behindFrom)
				}
			}
		})
	}
}

// TestPlanEncodesOncePerShape: groups that receive the same bytes at a revision share one encoding; groups
// whose events or prev_kv differ do not.
func TestPlanEncodesOncePerShape(t *testing.T) {
	t.Parallel()
	prev := &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("old"), ModRevision: 1}
	put := func(key string) *mvccpb.Event {
		return &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte(key), Value: []byte("v"), ModRevision: 2}, PrevKv: prev}
	}
	tests := []struct {
		name      string
		events    []*mvccpb.Event
		requests  []*pb.WatchCreateRequest
		encodings int
	}{
		{"key and prefix of one event", []*mvccpb.Event{put("a")},
			[]*pb.WatchCreateRequest{{Key: []byte("a")}, {Key: []byte("a"), RangeEnd: []byte("b")}, {Key: []byte("\x00"), RangeEnd: []byte("\x00")}}, 1},
		{"prev_kv differs", []*mvccpb.Event{put("a")},
			[]*pb.WatchCreateRequest{{Key: []byte("a")}, {Key: []byte("a"), PrevKv: true}}, 2},
		{"fragment differs", []*mvccpb.Event{put("a")},
			[]*pb.WatchCreateRequest{{Key: []byte("a")}, {Key: []byte("a"), Fragment: true}}, 2},
		{"different events", []*mvccpb.Event{put("a"), put("b")},
			[]*pb.WatchCreateRequest{{Key: []byte("a")}, {Key: []byte("b")}, {Key: []byte("a"), RangeEnd: []byte("c")}}, 3},
		{"same events by two ranges", []*mvccpb.Event{put("a"), put("b")},
			[]*pb.WatchCreateRequest{{Key: []byte("a"), RangeEnd: []byte("c")}, {Key: []byte("\x00"), RangeEnd: []byte("\x00")}}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newDispatchHub(t, 1, 0, Config{})
			h.mu.Lock()
			defer h.mu.Unlock()
			for i, req := range tc.requests {
				spec, err := specFromRequest(req)
				if err != nil {
					t.Fatal(err)
				}
				h.groups.join(&watcher{id: int64(i), spec: spec})
			}
			p, _ := h.plan(newRevisionEvents(2, tc.events, nil, time.Now()))
			distinct := map[*sharedResponse]bool{}
			for i, g := range p.groups {
				distinct[p.resps[i]] = true
				var resp pb.WatchResponse
				if err := proto.Unmarshal(p.resps[i].parts[0], &resp); err != nil {
					t.Fatal(err)
				}
				want := g.spec.selectEvents(nil, tc.events, h.compactRev)
				if len(resp.Events) != len(want) {
					t.Fatalf("group %q got %d events, want %d", g.key, len(resp.Events), len(want))
				}
				for j := range want {
					if !proto.Equal(resp.Events[j], want[j]) {
						t.Fatalf("group %q event %d: %v, want %v", g.key, j, resp.Events[j], want[j])
					}
				}
			}
			if len(p.groups) != len(tc.requests) || len(distinct) != tc.encodings {
				t.Fatalf("%d groups with %d encodings, want %d and %d", len(p.groups), len(distinct),
					len(tc.requests), tc.encodings)
			}
		})
	}
}

// TestParallelFanOutDeliversInOrder: with the fan-out split in shards dispatched in parallel at any size,
// watchers on many streams of several connections each receive every revision once, in order.
func TestParallelFanOutDeliversInOrder(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{})
	setFanOut(h, 4, 0)
	const clients, streamsPerClient, perStream, puts = 3, 4, 5, 40
	var watches []clientv3.WatchChan
	for c := range clients {
		cli := newClient(t, h.Addr())
		for s := range streamsPerClient {
			// client/v3 opens a gRPC stream per distinct outgoing metadata.
			ctx := metadata.AppendToOutgoingContext(ctxT(t), "stream", fmt.Sprintf("%d-%d", c, s))
			for range perStream {
				wch := cli.Watch(ctx, "k", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
				<-wch
				watches = append(watches, wch)
			}
		}
	}
	var first int64
	for i := range puts {
		rev := env.put(fmt.Sprintf("k%d", i%3), fmt.Sprint(i))
		if i == 0 {
			first = rev
		}
	}
	var failed atomic.Value
	var readers sync.WaitGroup
	for i, wch := range watches {
		readers.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					failed.Store(fmt.Sprint(r))
				}
			}()
			want := first
			deadline := time.After(30 * time.Second)
			for want < first+puts {
				select {
				case resp, ok := <-wch:
					if !ok || resp.Err() != nil {
						failed.Store(fmt.Sprintf("watch %d ended at revision %d: %v", i, want, resp.Err()))
						return
					}
					for _, ev := range resp.Events {
						if ev.Kv.ModRevision != want {
							failed.Store(fmt.Sprintf("watch %d got revision %d, want %d", i, ev.Kv.ModRevision, want))
							return
						}
						want++
					}
				case <-deadline:
					failed.Store(fmt.Sprintf("watch %d got revisions up to %d within 30s, want %d", i, want-1, first+puts-1))
					return
				}
			}
		})
	}
	readers.Wait()
	if msg := failed.Load(); msg != nil {
		t.Fatal(msg)
	}
}

// BenchmarkFanOut measures deliver alone (no network): one revision of one key for 100,000 watchers on 1,000
// streams, queued by one shard and by GOMAXPROCS shards in parallel. Compare the two in one run, at -cpu 1,2:
//
//	go test -run '^$' -bench FanOut -cpu 1,2 ./services/watchhub
func BenchmarkFanOut(b *testing.B) {
	const streams, perStream = 1000, 100
	for _, tc := range []struct {
		name   string
		shards int
	}{{"one shard", 1}, {"GOMAXPROCS shards", runtime.GOMAXPROCS(0)}} {
		b.Run(tc.name, func(b *testing.B) {
			h := newDispatchHub(b, tc.shards, defaultMinParallel, Config{})
			spec, _ := specFromRequest(&pb.WatchCreateRequest{Key: []byte("hot")})
			var all []*stream
			h.mu.Lock()
			for i := range streams {
				s := &stream{hub: h, shard: i, watchers: map[int64]*watcher{}, wake: make(chan struct{}, 1)}
				for id := range perStream {
					w := &watcher{id: int64(id), stream: s, spec: spec, minRev: 2}
					h.groups.join(w)
					h.setState(w, stateSynced)
				}
				all = append(all, s)
			}
			h.mu.Unlock()
			rev := int64(2)
			for b.Loop() {
				ev := &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte("hot"), Value: []byte("v"), ModRevision: rev}}
				h.deliver([]revisionEvents{newRevisionEvents(rev, []*mvccpb.Event{ev}, nil, time.Time{})})
				rev++
				b.StopTimer()
				for _, s := range all {
					taken := s.take()
					s.giveBack(&taken)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*streams*perStream), "ns/delivery")
		})
	}
}
