package frontend_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/tools/bench"
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
