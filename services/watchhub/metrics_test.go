package watchhub

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/testing/metricstest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestEtcdMetrics: a hub serves etcd's watch series with etcd's types, counting streams, watchers and events
// sent as etcd's MVCC does.
func TestEtcdMetrics(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{})
	rs := openRaw(t, dialHub(t, h.Addr()))
	for _, key := range []string{"a", "b"} {
		rs.create(&pb.WatchCreateRequest{Key: []byte(key)})
		if resp := rs.next(5 * time.Second); !resp.Created {
			t.Fatalf("response %v, want created", resp)
		}
	}
	env.put("a", "1")
	env.put("b", "1")
	rs.next(5 * time.Second)
	rs.next(5 * time.Second)

	var families metricstest.Families
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "both events counted", func() bool {
		families = metricstest.Gather(t, h.Registry())
		n, _ := metricstest.Value(families, "etcd_debugging_mvcc_events_total")
		return n == 2
	})
	counter, gauge := dto.MetricType_COUNTER, dto.MetricType_GAUGE
	metricstest.Expect(t, families, []metricstest.Want{
		{Name: "etcd_debugging_mvcc_watch_stream_total", Type: gauge},
		{Name: "etcd_debugging_mvcc_watcher_total", Type: gauge},
		{Name: "etcd_debugging_mvcc_slow_watcher_total", Type: gauge},
		{Name: "etcd_debugging_mvcc_events_total", Type: counter},
	})
	for _, v := range []struct {
		name string
		want float64
	}{
		{"etcd_debugging_mvcc_watch_stream_total", 1},
		{"etcd_debugging_mvcc_watcher_total", 2},
		{"etcd_debugging_mvcc_slow_watcher_total", 0},
	} {
		if got, _ := metricstest.Value(families, v.name); got != v.want {
			t.Errorf("%s = %v, want %v", v.name, got, v.want)
		}
	}
}
