package transport

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"
)

// Metrics are etcd's peer-network series (etcd's rafthttp metrics, same names, types, labels and buckets), plus
// etcd_server_heartbeat_send_failures_total, which counts, as etcd's, heartbeats a leader sent more than two
// heartbeat intervals after the previous one to the same peer, and here also heartbeats dropped unsent. Peers
// are labelled with their member ID in hex, as etcd labels them.
//
// The round-trip time is measured on raft's own heartbeats, not by a separate prober as etcd's is: from a
// MsgHeartbeat sent to a peer to the next MsgHeartbeatResp from it, so it includes the peer's raft loop. Only a
// leader sends heartbeats, so a follower's histograms stay empty (their series exist, with zero counts).
type Metrics struct {
	sentBytes         *prometheus.CounterVec
	receivedBytes     *prometheus.CounterVec
	sentFailures      *prometheus.CounterVec
	roundTrip         *prometheus.HistogramVec
	heartbeatFailures prometheus.Counter
}

// NewMetrics returns the transport's metrics, registered on reg unless reg is nil. One Metrics serves every
// Transport a member starts in its life, so it is made once, with the member.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		sentBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network",
			Name: "peer_sent_bytes_total", Help: "The total number of bytes sent to peers."}, []string{"To"}),
		receivedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network",
			Name: "peer_received_bytes_total", Help: "The total number of bytes received from peers."}, []string{"From"}),
		sentFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network",
			Name: "peer_sent_failures_total", Help: "The total number of send failures from peers."}, []string{"To"}),
		roundTrip: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "network",
			Name: "peer_round_trip_time_seconds", Help: "Round-Trip-Time histogram between peers",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"To"}),
		heartbeatFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server",
			Name: "heartbeat_send_failures_total",
			Help: "The total number of leader heartbeat send failures (likely overloaded from slow disk)."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.sentBytes, m.receivedBytes, m.sentFailures, m.roundTrip, m.heartbeatFailures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("transport: register metrics: %w", err)
		}
	}
	return m, nil
}

// peerLabel is how etcd labels a peer: its member ID in hex.
func peerLabel(id uint64) string { return fmt.Sprintf("%x", id) }

// peerMetrics are one peer's series, looked up once, and the heartbeat in flight to it.
type peerMetrics struct {
	sentBytes, receivedBytes, sentFailures prometheus.Counter
	roundTrip                              prometheus.Observer
	heartbeatFailures                      prometheus.Counter
	// heartbeatSent is when the oldest unanswered heartbeat to the peer was sent (unix nanoseconds), 0 when none.
	heartbeatSent atomic.Int64
	// lastHeartbeat is when the last heartbeat to the peer was queued (unix nanoseconds), 0 since leadership
	// changed.
	lastHeartbeat atomic.Int64
}

// forPeer returns peer id's series; a nil Metrics (none asked for) gives series registered nowhere.
func (m *Metrics) forPeer(id uint64) *peerMetrics {
	if m == nil {
		m, _ = NewMetrics(nil)
	}
	label := peerLabel(id)
	return &peerMetrics{
		sentBytes: m.sentBytes.WithLabelValues(label), receivedBytes: m.receivedBytes.WithLabelValues(label),
		sentFailures: m.sentFailures.WithLabelValues(label), roundTrip: m.roundTrip.WithLabelValues(label),
		heartbeatFailures: m.heartbeatFailures,
	}
}

// sent notes a message queued for the peer at now: a heartbeat starts a round trip unless one is already timed.
// It returns how late a heartbeat is: by how much it follows the previous one by more than twice interval (0
// if on time, or interval is 0), as etcd's leader checks.
func (p *peerMetrics) sent(m *raftpb.Message, interval time.Duration, at time.Time) (late time.Duration) {
	if m.GetType() != raftpb.MsgHeartbeat {
		return 0
	}
	now := at.UnixNano()
	if p.heartbeatSent.Load() == 0 {
		p.heartbeatSent.CompareAndSwap(0, now)
	}
	previous := p.lastHeartbeat.Swap(now)
	if interval <= 0 || previous == 0 {
		return 0
	}
	if late = time.Duration(now-previous) - 2*interval; late > 0 {
		p.heartbeatFailures.Inc()
		return late
	}
	return 0
}

// dropped counts a message that could not be sent to the peer; a dropped heartbeat is not answered.
func (p *peerMetrics) dropped(m *raftpb.Message) {
	p.sentFailures.Inc()
	if m.GetType() == raftpb.MsgHeartbeat {
		p.heartbeatFailures.Inc()
		p.heartbeatSent.Store(0)
	}
}

// linkFailed counts the queued messages a broken link dropped; the heartbeat in flight will not be answered.
func (p *peerMetrics) linkFailed(dropped int) {
	p.sentFailures.Add(float64(dropped))
	p.heartbeatSent.Store(0)
}

// answered ends the round trip in flight, if any, on a heartbeat response from the peer.
func (p *peerMetrics) answered() {
	if sent := p.heartbeatSent.Swap(0); sent != 0 {
		p.roundTrip.Observe(time.Since(time.Unix(0, sent)).Seconds())
	}
}

// peerSeries keeps the peerMetrics of every member messages came from or went to, so a received message finds
// its sender's (the round trip started when the heartbeat was sent) without a label lookup.
type peerSeries struct {
	metrics *Metrics
	mu      sync.Mutex
	byID    map[uint64]*peerMetrics
}

// resetHeartbeats forgets when heartbeats were last sent: a new leader's first one is not late.
func (s *peerSeries) resetHeartbeats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.byID {
		p.lastHeartbeat.Store(0)
	}
}

func (s *peerSeries) of(id uint64) *peerMetrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.byID[id]; ok {
		return p
	}
	if s.byID == nil {
		s.byID = map[uint64]*peerMetrics{}
	}
	p := s.metrics.forPeer(id)
	s.byID[id] = p
	return p
}
