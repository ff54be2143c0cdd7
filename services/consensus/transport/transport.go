package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// Raft is what the transport needs from the local raft node.
type Raft interface {
	// Process hands a received message to raft; it may block to slow the sender down.
	Process(ctx context.Context, m *raftpb.Message) error
	// IsIDRemoved reports whether id was removed from the cluster.
	IsIDRemoved(id uint64) bool
	// ReportUnreachable tells raft the last message to id may not have arrived.
	ReportUnreachable(id uint64)
	// ReportSnapshot tells raft how sending a snapshot to id ended.
	ReportSnapshot(id uint64, status raft.SnapshotStatus)
	// ReportRemoved tells the node a peer refused it as removed from the cluster.
	ReportRemoved()
}

// ErrRemoved is how a member refuses messages from a member removed from the cluster.
var ErrRemoved = status.Error(codes.PermissionDenied, "the member has been permanently removed from the cluster")

// ErrClusterMismatch is how a member refuses messages from another cluster.
var ErrClusterMismatch = status.Error(codes.FailedPrecondition, "etcdserver: cluster ID mismatch")

// Config configures a Transport.
type Config struct {
	MemberID  uint64
	ClusterID uint64
	Raft      Raft
	Logger    *slog.Logger
	// DialOptions are added to every peer connection (for example obs.Telemetry.DialOptions).
	DialOptions []grpc.DialOption
	// TLS secures every connection to a peer (the peers serve their port with the same link); nil: plain.
	TLS *tlsconfig.Link
	// QueueSize is the number of messages queued per peer and class; 0 means 4096.
	QueueSize int
	// MinBackoff and MaxBackoff bound the wait before re-opening a broken stream; 0 means 25 ms and 1 s.
	MinBackoff, MaxBackoff time.Duration
	// SnapshotTimeout bounds one snapshot call; 0 means 30 s.
	SnapshotTimeout time.Duration
	// CommitHold is how long an append without entries, which only tells a follower the new commit index,
	// waits for the next append to that follower, which tells it too; 0 means 2 ms. It waits only while
	// appends with entries go to that follower less than CommitHold apart. Under such a write load a
	// follower then wakes once per write rather than twice, and its storage applies while it fsyncs.
	CommitHold time.Duration
	// Metrics receives etcd's peer-network series; nil: they are kept nowhere.
	Metrics *Metrics
	// HeartbeatInterval is raft's; a heartbeat sent more than twice that after the previous one to the same peer
	// is logged and counted as a failure, as etcd does. 0: not checked.
	HeartbeatInterval time.Duration
	// ProbeInterval is how often a peer's health is checked: a peer whose control link is down is then
	// reported as etcd's peer prober reports it (WARN "prober detected unhealthy status", with the peer, the
	// last round-trip time and the error); 0 means etcd's 30 s.
	ProbeInterval time.Duration
	// Faults, when set, drops messages to and from blocked members (tests only).
	Faults *Faults
	// Dialer, when set, makes the connections to peers (addr is host:port), messages links and snapshot calls
	// alike, instead of TCP: tests run members on an in-memory network inside a synctest bubble.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
}

func (c Config) withDefaults() Config {
	if c.QueueSize <= 0 {
		c.QueueSize = 4096
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 25 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = time.Second
	}
	if c.SnapshotTimeout <= 0 {
		c.SnapshotTimeout = 30 * time.Second
	}
	if c.CommitHold <= 0 {
		c.CommitHold = 2 * time.Millisecond
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// maxBatchBytes caps one MessageBatch, well below MaxRecvMsgSize.
const maxBatchBytes = 8 << 20

// MaxRecvMsgSize is the gRPC receive limit a server carrying the Peer service must allow
// (grpc.MaxRecvMsgSize): a batch may hold a raft message of up to a few MiB.
const MaxRecvMsgSize = 64 << 20

// Transport sends raft messages to peers and serves the Peer service for messages from them.
type Transport struct {
	consensuspb.UnimplementedPeerServer
	cfg    Config
	series *peerSeries

	mu       sync.RWMutex
	peers    map[uint64]*peer
	stopped  bool
	stopping chan struct{} // closed by Stop: the links it serves end
}

// New returns a transport with no peers.
func New(cfg Config) (*Transport, error) {
	if cfg.MemberID == 0 || cfg.Raft == nil {
		return nil, errors.New("transport: MemberID and Raft are required")
	}
	return &Transport{cfg: cfg.withDefaults(), series: &peerSeries{metrics: cfg.Metrics}, peers: map[uint64]*peer{},
		stopping: make(chan struct{})}, nil
}

// Register adds the Peer service to s.
func (t *Transport) Register(s grpc.ServiceRegistrar) { consensuspb.RegisterPeerServer(s, t) }

// SetClusterID sets the cluster ID carried and checked on every message (a joining member learns it only
// after asking its peers).
func (t *Transport) SetClusterID(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cfg.ClusterID = id
}

func (t *Transport) clusterID() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.cfg.ClusterID
}

// AddPeer starts sending to member id at the first of urls; adding a known peer with the same URLs is a
// no-op, with other URLs it reconnects.
func (t *Transport) AddPeer(id uint64, urls []string) error {
	if id == t.cfg.MemberID {
		return nil
	}
	target, err := Target(urls)
	if err != nil {
		return fmt.Errorf("transport: peer %x: %w", id, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return errors.New("transport: stopped")
	}
	if old, ok := t.peers[id]; ok {
		if old.target == target {
			return nil
		}
		old.stop()
	}
	p, err := startPeer(t, id, target)
	if err != nil {
		return err
	}
	t.peers[id] = p
	return nil
}

// RemovePeer stops sending to member id.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	p, ok := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if ok {
		p.stop()
	}
}

// Send queues msgs for their peers. It never blocks: a message that does not fit its queue is dropped and
// its peer reported unreachable (raft retransmits).
func (t *Transport) Send(msgs []*raftpb.Message) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var entries entryEncoder
	for _, m := range msgs {
		to := m.GetTo()
		p, ok := t.peers[to]
		if !ok || t.cfg.Faults.drops(t.cfg.MemberID, to) {
			t.reportDropped(m)
			continue
		}
		var out outbound
		var err error
		if m.GetType() == raftpb.MsgSnap {
			out.head, err = proto.Marshal(m)
		} else {
			out.head, out.entries, err = encodeMessage(m, &entries)
		}
		if err != nil {
			t.cfg.Logger.Error("marshal raft message", "to", fmt.Sprintf("%x", to), "type", m.GetType().String(), "err", err)
			continue
		}
		if !p.enqueue(m, out) {
			t.reportDropped(m)
			continue
		}
		if late := p.metrics.sent(m, t.cfg.HeartbeatInterval, time.Now()); late > 0 {
			t.cfg.Logger.Warn("leader failed to send out heartbeat on time; took too long, leader is overloaded likely from slow disk",
				"to", fmt.Sprintf("%x", to), "heartbeat-interval", t.cfg.HeartbeatInterval,
				"expected-duration", 2*t.cfg.HeartbeatInterval, "exceeded-duration", late)
		}
	}
}

func (t *Transport) reportDropped(m *raftpb.Message) {
	t.series.of(m.GetTo()).dropped(m)
	if m.GetType() == raftpb.MsgSnap {
		t.cfg.Raft.ReportSnapshot(m.GetTo(), raft.SnapshotFailure)
	}
	t.cfg.Raft.ReportUnreachable(m.GetTo())
}

// LeadershipChanged tells the transport this member became or stopped being the leader, so its first heartbeat
// as a new leader is not counted late.
func (t *Transport) LeadershipChanged() { t.series.resetHeartbeats() }

// ActiveSince returns when the stream to member id last became healthy, or the zero time when it is not.
func (t *Transport) ActiveSince(id uint64) time.Time {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if p, ok := t.peers[id]; ok {
		return p.activeSince()
	}
	return time.Time{}
}

// Stop closes every peer connection. Inbound streams end when their gRPC server stops.
func (t *Transport) Stop() {
	t.mu.Lock()
	peers := t.peers
	if !t.stopped {
		close(t.stopping)
	}
	t.peers, t.stopped = map[uint64]*peer{}, true
	t.mu.Unlock()
	for _, p := range peers {
		p.stop()
	}
}

// Target turns member URLs (http://host:port) into the gRPC target of the first.
func Target(urls []string) (string, error) {
	if len(urls) == 0 {
		return "", errors.New("no peer URLs")
	}
	u, err := url.Parse(urls[0])
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("bad peer URL %q", urls[0])
	}
	return u.Host, nil
}
