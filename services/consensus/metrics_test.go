package consensus_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cairn-kv/cairn/internal/testing/metricstest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
)

// TestEtcdMetrics: after a few proposals on a 3-member cluster, every member serves etcd's series for what
// consensus owns, with etcd's types, labels and buckets, and values that say what etcd's say.
func TestEtcdMetrics(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{})
	leader := c.WaitLeader(10 * time.Second)
	proposeAll(t, c.Members(), 30, 3, "metrics")
	var peerIDs []string
	for _, m := range c.Members() {
		if m != leader {
			peerIDs = append(peerIDs, fmt.Sprintf("%x", m.Node().ID()))
		}
	}
	// The leader's heartbeats are answered within a few heartbeat intervals.
	waittest.Until(t, 10*time.Second, 10*time.Millisecond, "leader's round trips to both followers", func() bool {
		families := metricstest.Gather(t, leader.Registry())
		for _, id := range peerIDs {
			if n, _ := metricstest.Value(families, "etcd_network_peer_round_trip_time_seconds", "To="+id); n == 0 {
				return false
			}
		}
		return true
	})

	counter, gauge, histogram := dto.MetricType_COUNTER, dto.MetricType_GAUGE, dto.MetricType_HISTOGRAM
	wants := []metricstest.Want{
		{Name: "etcd_server_has_leader", Type: gauge},
		{Name: "etcd_server_is_leader", Type: gauge},
		{Name: "etcd_server_leader_changes_seen_total", Type: counter},
		{Name: "etcd_server_proposals_committed_total", Type: gauge},
		{Name: "etcd_server_proposals_failed_total", Type: counter},
		{Name: "etcd_server_heartbeat_send_failures_total", Type: counter},
		{Name: "etcd_disk_wal_fsync_duration_seconds", Type: histogram, Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)},
		{Name: "etcd_network_peer_sent_bytes_total", Type: counter, Labels: []string{"To"}, Samples: 2},
		{Name: "etcd_network_peer_received_bytes_total", Type: counter, Labels: []string{"From"}, Samples: 2},
		{Name: "etcd_network_peer_sent_failures_total", Type: counter, Labels: []string{"To"}, Samples: 2},
		{Name: "etcd_network_peer_round_trip_time_seconds", Type: histogram, Labels: []string{"To"}, Samples: 2,
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)},
	}
	leaders := 0.0
	for _, m := range c.Members() {
		t.Run(m.Name, func(t *testing.T) {
			families := metricstest.Gather(t, m.Registry())
			metricstest.Expect(t, families, wants)
			for _, check := range []struct {
				name  string
				least float64
			}{
				{"etcd_server_has_leader", 1},
				{"etcd_server_leader_changes_seen_total", 1},
				{"etcd_server_proposals_committed_total", 30},
				{"etcd_disk_wal_fsync_duration_seconds", 1},
			} {
				if v, _ := metricstest.Value(families, check.name); v < check.least {
					t.Errorf("%s = %v, want at least %v", check.name, v, check.least)
				}
			}
			isLeader, _ := metricstest.Value(families, "etcd_server_is_leader")
			leaders += isLeader
		})
	}
	if leaders != 1 {
		t.Errorf("etcd_server_is_leader sums to %v over the members, want 1", leaders)
	}
}
