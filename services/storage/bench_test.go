package storage

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/tools/bench"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// BenchmarkSubmitPut measures the whole write path in-process: check, propose to an in-memory log, apply,
// answer, with 64 concurrent writers of single-key puts of 256-byte values and the default batched commits.
func BenchmarkSubmitPut(b *testing.B) {
	cfg := testConfig(b, 1)
	cfg.BatchInterval, cfg.AdminAddr = 0, ""
	m := startMember(b, cfg, newMemlog(b, 1), nil)
	value := make([]byte, 256)
	var n atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pbb *testing.PB) {
		ctx := context.Background()
		for pbb.Next() {
			key := []byte(fmt.Sprintf("/registry/k%09d", n.Add(1)))
			if _, err := m.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: key, Value: value}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "puts/s")
}

// BenchmarkRangeGRPC measures a serializable point Range over loopback gRPC at 100k keys.
func BenchmarkRangeGRPC(b *testing.B) {
	cfg := testConfig(b, 1)
	cfg.AdminAddr = ""
	m := startMember(b, cfg, newMemlog(b, 1), nil)
	ctx := context.Background()
	const keys = 100000
	value := make([]byte, 256)
	st := m.currentStore()
	for i := range keys {
		if _, err := st.Apply(uint64(i+1), 1, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(fmt.Sprintf("k%07d", i)), Value: value}}); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		resp, err := m.client.Range(ctx, &pb.RangeRequest{Key: []byte(fmt.Sprintf("k%07d", (i*7919)%keys)), Serializable: true})
		lat = append(lat, time.Since(t0))
		if err != nil || len(resp.Kvs) != 1 {
			b.Fatalf("range: %v %v", resp, err)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkPipelineRange measures serializable point Ranges from 256 concurrent callers over one Pipeline (a
// frontend's path to storage) on loopback gRPC, with the process CPU time per call (client and server both).
func BenchmarkPipelineRange(b *testing.B) {
	cfg := testConfig(b, 1)
	cfg.AdminAddr = ""
	m := startMember(b, cfg, newMemlog(b, 1), nil)
	st := m.currentStore()
	const keys = 1000
	for i := range keys {
		if _, err := st.Apply(uint64(i+1), 1, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(fmt.Sprintf("k%07d", i)), Value: []byte("v")}}); err != nil {
			b.Fatal(err)
		}
	}
	p := dialPipeline(b, m)
	runPipelineCalls(b, 256, func(ctx context.Context, i int64) error {
		key := []byte(fmt.Sprintf("k%07d", i%keys))
		if resp, err := p.Range(ctx, &pb.RangeRequest{Key: key, Serializable: true}, 0); err != nil || len(resp.Kvs) != 1 {
			return fmt.Errorf("range %s: %v %v", key, resp, err)
		}
		return nil
	})
}

// BenchmarkPipelinePut measures puts over the pipeline with 1024 in flight, as a leader's storage serves a
// frontend under etcd's 1000-client put benchmark: most calls wait for their entry to be applied.
func BenchmarkPipelinePut(b *testing.B) {
	cfg := testConfig(b, 1)
	cfg.AdminAddr = ""
	m := startMember(b, cfg, newMemlog(b, 1), nil)
	p := dialPipeline(b, m)
	value := make([]byte, 256)
	runPipelineCalls(b, 1024, func(ctx context.Context, i int64) error {
		_, err := p.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(fmt.Sprintf("k%07d", i)), Value: value}})
		return err
	})
}

// runPipelineCalls runs call b.N times from about inFlight goroutines and reports calls/s and the process's CPU
// per call.
func runPipelineCalls(b *testing.B, inFlight int, call func(ctx context.Context, i int64) error) {
	var n atomic.Int64
	b.SetParallelism(inFlight / max(1, runtime.GOMAXPROCS(0)))
	cpu0, start := bench.ProcessCPU(), time.Now()
	b.ResetTimer()
	b.RunParallel(func(pbb *testing.PB) {
		ctx := context.Background()
		for pbb.Next() {
			if err := call(ctx, n.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
	b.ReportMetric(float64((bench.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/call")
}
