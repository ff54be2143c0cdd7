package bench

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/tools/etcdref"
)

// startEtcd starts a one-member reference etcd and returns it, a client of it for checking what a benchmark
// left, and a context bounding the test to a minute.
func startEtcd(t *testing.T) (*etcdref.Cluster, *clientv3.Client, context.Context) {
	t.Helper()
	cluster := etcdreftest.StartCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	check, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = check.Close() })
	return cluster, check, ctx
}
