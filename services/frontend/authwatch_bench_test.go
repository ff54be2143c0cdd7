package frontend_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/tools/bench"
	"github.com/cairn-kv/cairn/services/frontend"
)

// BenchmarkAuthWatchStreams splits what creating watchers costs with auth on into what each create costs and
// what each new stream costs, auth off and on (bcrypt cost 4 and etcd's default 10) in the same run, through a
// frontend of a 1-member in-process cluster, as root, on a client/v3 connection as `cairn bench watch` uses,
// with the CPU time per op of the whole process (steadier than the wall time on a shared machine):
//
//   - create/streams=N: b.N watchers created over N streams opened beforehand (every create sent, then every
//     created response awaited); the frontend checks each create against its copy of the auth store.
//   - open-stream: a new stream and one create on it. client/v3 authenticates again before every new stream
//     (getToken in its stream interceptor, etcd issue 11954), so with auth on this is an Authenticate call
//     (a bcrypt comparison at the frontend's --bcrypt-cost and an Authenticate entry through the log) per
//     stream, as against etcd.
//
// go test -run '^$' -bench AuthWatchStreams -benchtime 2000x ./services/frontend (open-stream: -benchtime 20x)
func BenchmarkAuthWatchStreams(b *testing.B) {
	for _, mode := range []struct {
		name       string
		bcryptCost int // 0: auth off
	}{{"off", 0}, {"on-bcrypt4", 4}, {"on-bcrypt10", 10}} {
		c := clustertest.Start(b, clustertest.Options{Members: 1, Watchhubs: 1,
			ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost = max(mode.bcryptCost, 4) }})
		ctx := b.Context()
		cli := c.Client(b)
		if mode.bcryptCost != 0 {
			for _, step := range []func() error{
				func() error { _, err := cli.UserAdd(ctx, "root", "pw"); return err },
				func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
				func() error { _, err := cli.AuthEnable(ctx); return err },
			} {
				if err := step(); err != nil {
					b.Fatal(err)
				}
			}
			var err error
			if cli, err = clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Username: "root", Password: "pw",
				DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = cli.Close() })
		}
		for _, streams := range []int{1, 10} {
			b.Run(fmt.Sprintf("create/streams=%d/auth=%s", streams, mode.name), func(b *testing.B) {
				createWatchers(b, cli.ActiveConnection(), streams)
			})
		}
		b.Run("open-stream/auth="+mode.name, func(b *testing.B) {
			cpuBefore := bench.ProcessCPU()
			for b.Loop() {
				sctx, cancel := context.WithCancel(ctx)
				stream, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(sctx)
				if err == nil {
					err = stream.Send(watchCreate("bench/key"))
				}
				if err == nil {
					err = awaitCreated(stream, 1)
				}
				cancel()
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((bench.ProcessCPU()-cpuBefore).Microseconds())/float64(b.N), "cpu-µs/op")
		})
		c.Stop()
	}
}

// createWatchers creates b.N watchers over streams streams opened first, outside the timer.
func createWatchers(b *testing.B, conn *grpc.ClientConn, streams int) {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	watchStreams := make([]pb.Watch_WatchClient, streams)
	for i := range watchStreams {
		var err error
		if watchStreams[i], err = pb.NewWatchClient(conn).Watch(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cpuBefore := bench.ProcessCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i, stream := range watchStreams {
		share := b.N/streams + min(1, max(0, b.N%streams-i)) // the first b.N%streams streams take one more
		wg.Go(func() {
			go func() {
				for range share {
					if err := stream.Send(watchCreate("bench/key")); err != nil {
						return // Recv fails too
					}
				}
			}()
			errs <- awaitCreated(stream, share)
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((bench.ProcessCPU()-cpuBefore).Microseconds())/float64(b.N), "cpu-µs/op")
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

func watchCreate(key string) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
		CreateRequest: &pb.WatchCreateRequest{Key: []byte(key)}}}
}

// awaitCreated receives until n watchers of stream are created; a canceled one is an error.
func awaitCreated(stream pb.Watch_WatchClient, n int) error {
	for created := 0; created < n; {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if resp.Canceled {
			return fmt.Errorf("watch %d canceled: %s", resp.WatchId, resp.CancelReason)
		}
		if resp.Created {
			created++
		}
	}
	return nil
}
