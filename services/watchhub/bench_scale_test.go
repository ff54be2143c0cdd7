package watchhub

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// BenchmarkDeliveryScaling measures a hub's delivery capacity: streams × 100 watchers of one key on 3 client
// connections, written in rounds of putsPerRound puts issued back to back (faster than the hub delivers them,
// so its streams fall behind, as in an overload), each round waiting until every watcher has its events.
// It reports events/s and events per CPU-second of the whole process (hub, storage, NATS and the clients,
// which count messages without decoding them). Run it at GOMAXPROCS 1 and 2 and compare ratios within one run:
//
//	go test -run '^$' -bench DeliveryScaling -benchtime 20x -cpu 1,2 ./services/watchhub
func BenchmarkDeliveryScaling(b *testing.B) {
	for _, tc := range []struct{ streams, putsPerRound int }{{100, 20}, {1000, 5}} {
		const perStream = 100
		b.Run(fmt.Sprintf("%d watchers on %d streams", tc.streams*perStream, tc.streams), func(b *testing.B) {
			env := newTestEnv(b, 1)
			h := env.startHub(Config{})
			watchers := tc.streams * perStream
			var delivered atomic.Int64
			var target atomic.Int64
			reached := make(chan struct{}, 1)
			onMessage := func(events int) {
				if n := delivered.Add(int64(events)); n >= target.Load() && n-int64(events) < target.Load() {
					reached <- struct{}{}
				}
			}
			await := func(n int64) {
				if target.Add(n) <= delivered.Load() {
					select { // already there: take the signal if onMessage gave one
					case <-reached:
					default:
					}
					return
				}
				select {
				case <-reached:
				case <-time.After(time.Minute):
					b.Fatalf("delivered %d of %d messages within a minute", delivered.Load(), target.Load())
				}
			}
			openRawWatchers(b, h.Addr(), 3, tc.streams, perStream, onMessage)
			await(int64(watchers)) // the created responses (counted as one each)
			cpuBefore := processCPU()
			b.ResetTimer()
			for b.Loop() {
				for i := range tc.putsPerRound {
					env.put("hot", fmt.Sprint(i))
				}
				await(int64(watchers * tc.putsPerRound))
			}
			b.StopTimer()
			cpu := processCPU() - cpuBefore
			events := float64(watchers * tc.putsPerRound * b.N)
			b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(events/cpu.Seconds(), "events/cpu-s")
		})
	}
}

// openRawWatchers opens streams Watch streams over conns connections, each with perStream watchers of the key
// "hot"; every response received calls onMessage with its number of events (1 for one without), read
// without decoding the response.
func openRawWatchers(b *testing.B, addr string, conns, streams, perStream int, onMessage func(events int)) {
	b.Helper()
	var clients []*grpc.ClientConn
	for range conns {
		clients = append(clients, dialHub(b, addr))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var readers sync.WaitGroup
	b.Cleanup(func() { cancel(); readers.Wait() })
	create := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
		CreateRequest: &pb.WatchCreateRequest{Key: []byte("hot")}}}
	for s := range streams {
		stream, err := clients[s%conns].NewStream(ctx, &pb.Watch_ServiceDesc.Streams[0], pb.Watch_Watch_FullMethodName,
			grpc.ForceCodecV2(wiremsg.NewCodec()))
		if err != nil {
			b.Fatal(err)
		}
		readers.Go(func() {
			for {
				var msg wiremsg.Raw
				if err := stream.RecvMsg(&msg); err != nil {
					return
				}
				onMessage(max(1, countEvents(msg.Data)))
			}
		})
		for range perStream {
			if err := stream.SendMsg(create); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// countEvents counts the events fields (11) of an encoded WatchResponse.
func countEvents(resp []byte) int {
	events := 0
	for len(resp) > 0 {
		num, typ, n := protowire.ConsumeTag(resp)
		if n < 0 {
			return events
		}
		resp = resp[n:]
		if num == 11 {
			events++
		}
		if n = protowire.ConsumeFieldValue(num, typ, resp); n < 0 {
			return events
		}
		resp = resp[n:]
	}
	return events
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
