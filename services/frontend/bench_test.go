package frontend_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
	"github.com/cairn-kv/cairn/internal/tools/bench"
	"github.com/cairn-kv/cairn/services/frontend"
)

// BenchmarkRangeList measures a Kubernetes-style LIST through a frontend: a serializable range over 5000 keys
// of 1 KiB (5 MiB), from 8 concurrent callers on one connection, with the process CPU time per list (clients,
// frontends and storages of the in-process cluster all count).
func BenchmarkRangeList(b *testing.B) {
	c := clustertest.Start(b, clustertest.Options{})
	fe := c.Frontends()[0]
	conn := rawConn(b, fe.URL)
	kv := pb.NewKVClient(conn)
	ctx := b.Context()
	value := []byte(strings.Repeat("v", 1024))
	const keys = 5000
	for i := range keys {
		if _, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("/registry/pods/ns/pod-%05d", i)), Value: value}); err != nil {
			b.Fatal(err)
		}
	}
	list := &pb.RangeRequest{Key: []byte("/registry/pods/"), RangeEnd: []byte("/registry/pods0"), Serializable: true}
	time.Sleep(time.Second) // every storage has applied the puts
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
	cpu0, start := bench.ProcessCPU(), time.Now()
	b.ResetTimer()
	b.RunParallel(func(pbb *testing.PB) {
		for pbb.Next() {
			resp, err := kv.Range(ctx, list, grpc.MaxCallRecvMsgSize(64<<20))
			if err != nil || len(resp.Kvs) != keys {
				b.Errorf("list: %d keys, %v", len(resp.GetKvs()), err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "lists/s")
	b.ReportMetric(float64((bench.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/list")
}

// BenchmarkAuth measures what authentication costs on the hot paths, off and on in the same run: a put from
// one client, linearizable point reads from parallel clients, and watch creates (each waits for its created
// response), through a frontend of a 1-member in-process cluster, as root (etcd's own cost is the reference:
// `cairn bench --user root:PW` against etcd with auth enabled gives it).
func BenchmarkAuth(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		c := clustertest.Start(b, clustertest.Options{Members: 1, Watchhubs: 1,
			ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost = 4 }})
		ctx := b.Context()
		cli := c.Client(b)
		if mode == "on" {
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
		if _, err := cli.Put(ctx, "bench/key", "v"); err != nil {
			b.Fatal(err)
		}
		b.Run("put/auth="+mode, func(b *testing.B) {
			for b.Loop() {
				if _, err := cli.Put(ctx, "bench/key", "v"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("range-l/auth="+mode, func(b *testing.B) {
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cli.Get(ctx, "bench/key"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run("watch-create/auth="+mode, func(b *testing.B) {
			for b.Loop() {
				wctx, cancel := context.WithCancel(ctx)
				w := cli.Watch(wctx, "bench/key", clientv3.WithCreatedNotify())
				if resp := <-w; !resp.Created {
					b.Fatalf("watch not created: %v", resp.Err())
				}
				cancel()
			}
		})
		c.Stop()
	}
}

// BenchmarkClientPortTLS measures puts from 256 concurrent callers on one client connection to an http and
// an https (--client-cert-auth) client port, with the CPU time per put of the whole process (client and
// server; user and system), steadier than the wall time on a shared machine.
// go test -run '^$' -bench ClientPortTLS -benchtime 20000x ./services/frontend/
func BenchmarkClientPortTLS(b *testing.B) {
	certs := certtest.Write(b)
	for _, port := range []string{"http", "https"} {
		opts := clustertest.Options{Members: 1}
		if port == "https" {
			opts.ConfigureFrontend = clustertest.ServeHTTPS(certs)
			opts.ClientTLS = certs.ClientTLS(b, certs.ClientCert, certs.ClientKey)
		}
		c := clustertest.Start(b, opts)
		cli := c.Client(b)
		ctx := b.Context()
		if _, err := cli.Put(ctx, "bench/key", "v"); err != nil {
			b.Fatal(err)
		}
		b.Run("put/"+port, func(b *testing.B) {
			b.SetParallelism(max(1, 256/runtime.GOMAXPROCS(0)))
			cpuBefore := bench.ProcessCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cli.Put(ctx, "bench/key", "v"); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64((bench.ProcessCPU()-cpuBefore).Microseconds())/float64(b.N), "cpu-µs/op")
		})
		c.Stop()
	}
}
