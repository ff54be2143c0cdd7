package watchhub

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// benchWatchers opens streams×perStream watchers on the hub (keys chosen by keyOf) and waits until every
// one is created. Each stream's responses are handed to onResp from its own goroutine.
func benchWatchers(b *testing.B, h *Hub, streams, perStream int, keyOf func(i int) string,
	onResp func(*pb.WatchResponse)) {
	b.Helper()
	conn := dialHub(b, h.Addr())
	var created sync.WaitGroup
	created.Add(streams * perStream)
	for s := range streams {
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		stream, err := pb.NewWatchClient(conn).Watch(ctx)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				resp, err := stream.Recv()
				if err != nil {
					return
				}
				if resp.Created {
					created.Done()
					continue
				}
				if onResp != nil {
					onResp(resp)
				}
			}
		}()
		for w := range perStream {
			req := &pb.WatchCreateRequest{Key: []byte(keyOf(s*perStream + w))}
			if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	created.Wait()
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkIdleWatcherMemory reports the heap per idle watcher (hub and the test's raw client streams
// together, so an upper bound on the hub's share), for 10,000 watchers on 10 streams.
//
//	go test -run '^$' -bench IdleWatcherMemory -benchtime 1x ./services/watchhub
func BenchmarkIdleWatcherMemory(b *testing.B) {
	for _, tc := range []struct {
		name  string
		keyOf func(int) string
	}{
		{"one key", func(int) string { return "hot" }},
		{"distinct keys", func(i int) string { return fmt.Sprintf("key/%08d", i) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const streams, perStream = 10, 1000
			env := newTestEnv(b, 1)
			h := env.startHub(Config{})
			for b.Loop() {
				before := heapInUse()
				benchWatchers(b, h, streams, perStream, tc.keyOf, nil)
				after := heapInUse()
				b.ReportMetric(float64(after-before)/(streams*perStream), "B/watcher")
			}
		})
	}
}

// BenchmarkFanOutLatency: 10,000 watchers on one key (on 10 or 100 streams), puts at 10, 50 or 100 per
// second; it reports the latency from issuing a put to each watcher receiving its event (etcd's
// watch-latency), p50 and p99, and the events delivered per second.
//
//	go test -run '^$' -bench FanOutLatency -benchtime 1x ./services/watchhub
func BenchmarkFanOutLatency(b *testing.B) {
	for _, tc := range []struct{ streams, putsPerSecond int }{{10, 10}, {10, 50}, {10, 100}, {100, 10}, {100, 50}} {
		streams := tc.streams
		b.Run(fmt.Sprintf("10000 watchers on %d streams, %d puts per s", streams, tc.putsPerSecond), func(b *testing.B) {
			env := newTestEnv(b, 1)
			h := env.startHub(Config{})
			const watchers = 10000
			puts := 2 * tc.putsPerSecond
			type arrival struct {
				rev int64
				at  time.Time
			}
			var mu sync.Mutex
			arrivals := make([]arrival, 0, watchers*puts)
			var received sync.WaitGroup
			benchWatchers(b, h, streams, watchers/streams, func(int) string { return "hot" }, func(resp *pb.WatchResponse) {
				now := time.Now()
				mu.Lock()
				for _, ev := range resp.Events {
					arrivals = append(arrivals, arrival{ev.Kv.ModRevision, now})
					received.Done()
				}
				mu.Unlock()
			})
			putStart := map[int64]time.Time{}
			limiter := rate.NewLimiter(rate.Limit(tc.putsPerSecond), 1)
			for b.Loop() {
				received.Add(watchers * puts)
				for i := range puts {
					if err := limiter.Wait(context.Background()); err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					putStart[env.put("hot", fmt.Sprint(i))] = start // events may arrive before the put answers
				}
				received.Wait()
			}
			mu.Lock()
			defer mu.Unlock()
			latencies := make([]time.Duration, len(arrivals))
			for i, a := range arrivals {
				latencies[i] = a.at.Sub(putStart[a.rev])
			}
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(len(latencies))/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkEncodeForWatchers compares one event's encoding for 10,000 watchers of one group: shared (encoded
// once, then each watcher's ID prepended by the codec) against marshalling a response per watcher.
//
//	go test -run '^$' -bench EncodeForWatchers ./services/watchhub
func BenchmarkEncodeForWatchers(b *testing.B) {
	const watchers = 10000
	header := &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 1234, RaftTerm: 3}
	events := []*mvccpb.Event{{Kv: &mvccpb.KeyValue{Key: []byte("/registry/pods/default/x"), Value: make([]byte, 512),
		CreateRevision: 10, ModRevision: 1234, Version: 7}}}
	c := newCodec()
	ids := make([]mem.Buffer, watchers)
	for i := range ids {
		ids[i] = newWatchIDField(int64(i))
	}
	b.Run("shared", func(b *testing.B) {
		for b.Loop() {
			shared, err := encodeShared(header, events, 0)
			if err != nil {
				b.Fatal(err)
			}
			for id := range int64(watchers) {
				if _, err := c.Marshal(&encodedResponse{watchID: ids[id], part: shared.boxed[0]}); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("per watcher", func(b *testing.B) {
		for b.Loop() {
			for id := range int64(watchers) {
				if _, err := proto.Marshal(&pb.WatchResponse{Header: header, WatchId: id, Events: events}); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
