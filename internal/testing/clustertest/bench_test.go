package clustertest

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/tools/bench"
	"github.com/cairn-kv/cairn/services/frontend"
)

// BenchmarkStandardVsEtcd runs the rows of etcd's performance documentation (put with 1 client, put with
// 1000 clients on 100 connections, linearizable and serializable range) against a 3-member Cairn cluster in
// this process (etcd's default heartbeat and election timeout) and a 3-member reference etcd v3.7.3, in
// one run, and prints the comparison. b.N is ignored: each row runs its fixed total once.
// CAIRN_BENCH_SINGLE and CAIRN_BENCH_MANY override the totals (defaults 2000 and 20000),
// CAIRN_BENCH_CONNS_PER_STORAGE the frontends' --conns-per-storage.
//
//	go test ./internal/testing/clustertest -run '^$' -bench StandardVsEtcd -benchtime 1x
func BenchmarkStandardVsEtcd(b *testing.B) {
	total := func(env string, def int64) int64 {
		if v, err := strconv.ParseInt(os.Getenv(env), 10, 64); err == nil && v > 0 {
			return v
		}
		return def
	}
	etcd := etcdreftest.StartCluster(b, 3)
	cairn := Start(b, Options{HeartbeatInterval: 100 * time.Millisecond, ElectionTimeout: time.Second,
		ConfigureFrontend: func(cfg *frontend.Config) {
			cfg.ConnsPerStorage = int(total("CAIRN_BENCH_CONNS_PER_STORAGE", int64(cfg.ConnsPerStorage)))
		}})
	scenarios, err := bench.StandardScenarios(bench.StandardOptions{
		SingleClientTotal: total("CAIRN_BENCH_SINGLE", 2000), ManyClientsTotal: total("CAIRN_BENCH_MANY", 20000)})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	results, err := bench.Compare(context.Background(), bench.CompareConfig{
		Targets:   []bench.Target{{Name: "etcd", Endpoints: etcd.Endpoints()}, {Name: "cairn", Endpoints: cairn.Endpoints()}},
		Scenarios: scenarios, DialTimeout: 5 * time.Second, RequestTimeout: 30 * time.Second,
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if err := bench.WriteComparison(os.Stdout, results); err != nil {
		b.Fatal(err)
	}
}
