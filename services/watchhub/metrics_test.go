package watchhub

import (
	"math"
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

// TestSendStatsStampsLatency: a live response's delivery latency runs from its revision's arrival to the clock
// reading after its write (stamp), responses that arrived together are counted as many times as written, and a
// response that is not live (no arrival) counts as sent with no latency; a flush stamps what is left unstamped.
func TestSendStatsStampsLatency(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name      string
		received  []time.Time // one per response written
		stamp     time.Time   // zero: none before the flush
		wantCount uint64
		wantSum   float64 // seconds; unchecked without a stamp or when negative
	}{
		{"none", nil, ms(10), 0, 0},
		{"one", []time.Time{t0}, ms(10), 1, 0.010},
		{"arrived together", []time.Time{t0, t0, t0}, ms(10), 3, 0.030},
		{"arrivals interleaved", []time.Time{t0, ms(5), t0, ms(5)}, ms(10), 4, 0.030},
		{"not live", []time.Time{{}, t0, {}}, ms(10), 1, 0.010},
		{"stamped by the flush", []time.Time{t0, t0}, time.Time{}, 2, 0},
		{"many arrivals stamped early", manyArrivals(t0, 3*maxUnstamped), ms(10), 3 * maxUnstamped, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMetrics(nil)
			st := m.newSendStats()
			for _, r := range tt.received {
				st.sent(1, 1, r)
				if len(st.unstamped) > maxUnstamped {
					t.Fatalf("%d arrivals unstamped, more than %d", len(st.unstamped), maxUnstamped)
				}
			}
			if !tt.stamp.IsZero() {
				st.stamp(tt.stamp)
			}
			st.flush(m)
			families := metricstest.Gather(t, m.registry)
			if n, _ := metricstest.Value(families, "cairn_watchhub_responses_sent_total"); n != float64(len(tt.received)) {
				t.Errorf("responses sent %v, want %d", n, len(tt.received))
			}
			mf := families["cairn_watchhub_delivery_latency_seconds"]
			if mf == nil || len(mf.GetMetric()) != 1 {
				t.Fatalf("delivery latency family %v", mf)
			}
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != tt.wantCount {
				t.Fatalf("latency count %d, want %d", h.GetSampleCount(), tt.wantCount)
			}
			if !tt.stamp.IsZero() && tt.wantSum >= 0 && math.Abs(h.GetSampleSum()-tt.wantSum) > 1e-9 {
				t.Errorf("latency sum %v, want %v", h.GetSampleSum(), tt.wantSum)
			}
			if tt.stamp.IsZero() && h.GetSampleSum() < float64(len(tt.received))*time.Since(t0).Seconds()*0.99 {
				t.Errorf("latency sum %v: the flush did not stamp with the time now", h.GetSampleSum())
			}
		})
	}
}

// TestSendStatsDue: a sender that never pauses flushes once statsFlushEvery observations wait, or once some
// have waited statsFlushInterval since its last flush, and never with nothing to add; a flush with nothing
// counted changes nothing, not even when the interval starts.
func TestSendStatsDue(t *testing.T) {
	tests := []struct {
		name      string
		responses int
		lags      int
		after     time.Duration // since the last flush
		want      bool
	}{
		{"nothing counted, long after", 0, 0, time.Hour, false},
		{"one response, just after", 1, 0, time.Millisecond, false},
		{"one response, an interval after", 1, 0, statsFlushInterval, true},
		{"one lag observation, an interval after", 0, 1, statsFlushInterval, true},
		{"a full count, just after", statsFlushEvery, 0, 0, true},
		{"responses and lags make the count", statsFlushEvery / 2, statsFlushEvery / 2, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMetrics(nil)
			st := m.newSendStats()
			st.sent(1, 1, time.Time{})
			st.flush(m)
			flushed := st.flushedAt
			if flushed.IsZero() {
				t.Fatal("a flush of a count did not note its time")
			}
			st.flush(m) // nothing counted: not a flush
			if st.flushedAt != flushed {
				t.Fatal("a flush with nothing counted moved the last flush's time")
			}
			for range tt.responses {
				st.sent(1, 1, time.Time{})
			}
			for range tt.lags {
				st.lag.Observe(0.1)
			}
			if got := st.due(flushed.Add(tt.after)); got != tt.want {
				t.Fatalf("due %v after the flush: %v, want %v", tt.after, got, tt.want)
			}
		})
	}
}

// manyArrivals is n responses, each from a revision that arrived a microsecond after the one before.
func manyArrivals(t0 time.Time, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = t0.Add(time.Duration(i) * time.Microsecond)
	}
	return out
}
