package consensus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/services/consensus/transport"
	"github.com/cairn-kv/cairn/services/consensus/wal"
)

// ErrRemoved is why a member stopped after it was removed from the cluster.
var ErrRemoved = errors.New("consensus: this member was removed from the cluster")

// ExitCodeRemoved is the exit status of `cairn consensus` when its member stopped with ErrRemoved: a
// supervisor must not restart it (it would only be refused again). 78 is sysexits' EX_CONFIG.
const ExitCodeRemoved = 78

// Node is one consensus member: the raft loop, its WAL, its transport and its gRPC services. It implements
// commitlog.Log for the storage in the same process, and etcd's membership operations for the frontend.
type Node struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	tracer  trace.Tracer
	stages  obs.StageTracer
	tel     *obs.Telemetry
	metrics *metrics

	memberID  uint64
	clusterID uint64

	wal       *wal.WAL
	storage   *logStore
	transport *transport.Transport
	servers   []*grpc.Server
	// ports serve the peer and Consensus listeners (gRPC and the framed links on each); closed on shutdown.
	ports []*framed.Port

	// The channels into the raft loop; everything that touches raft goes through them.
	proposeC chan *proposal
	recvC    chan *raftpb.Message
	controlC chan func()
	// proposals are finished proposals, emptied by the raft loop, for newProposal to reuse.
	proposals sync.Pool

	loop *raftLoop // owned by the loop goroutine once started

	// mu guards members, which the loop changes and everyone reads.
	mu      sync.RWMutex
	members *membership

	// Published by the loop after each Ready.
	lead, term, commitIndex atomic.Uint64
	isLeader, isLearner     atomic.Bool
	// published is set once the membership holds this member's current attributes (name, client and
	// storage URLs); until then the member is not healthy, as an etcd member does not serve before it has
	// published itself.
	published atomic.Bool

	deliver *deliverable
	reads   *readIndexer
	changes *changeWaiters
	// configMu serializes this member's membership changes: raft drops a conf change proposed while
	// another is pending, so concurrent ones would only time out.
	configMu sync.Mutex

	// snapshotReports holds the outcomes of snapshots sent to followers until forwardSnapshotReports hands
	// them to the loop; snapshotReported signals that one was added.
	snapshotReportsMu sync.Mutex
	snapshotReports   []snapshotReport
	snapshotReported  chan struct{}

	stopping chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	errMu    sync.Mutex
	err      error
	wg       sync.WaitGroup
}

var _ commitlog.Log = (*Node)(nil)

// New checks cfg and prepares a member; Start brings it up.
func New(cfg Config, deps Deps) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("consensus: %w", err)
	}
	if len(deps.PeerListeners) == 0 && len(cfg.ListenPeerURLs) == 0 {
		return nil, fmt.Errorf("consensus: %w", config.Invalid("--listen-peer-urls", "--listen-peer-urls must not be empty"))
	}
	if err := checkPeerTLS(cfg, deps.Peer); err != nil {
		return nil, fmt.Errorf("consensus: %w", err)
	}
	deps = deps.withDefaults()
	n := &Node{
		cfg:      cfg,
		deps:     deps,
		log:      deps.Logger,
		tel:      deps.Telemetry,
		tracer:   deps.Telemetry.Tracer("github.com/cairn-kv/cairn/services/consensus"),
		stages:   deps.Telemetry.Stages("consensus", cfg.Name),
		proposeC: make(chan *proposal, 4096),
		recvC:    make(chan *raftpb.Message, 4096),
		controlC: make(chan func(), 1024),
		members:  newMembership(),
		deliver:  newDeliverable(),
		changes:  newChangeWaiters(),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),

		snapshotReported: make(chan struct{}, 1),
	}
	n.reads = newReadIndexer(n)
	m, err := newMetrics(deps.Registry, n.commitIndex.Load)
	if err != nil {
		return nil, fmt.Errorf("consensus: metrics: %w", err)
	}
	n.metrics = m
	return n, nil
}

// Start opens (or creates) the WAL, rebuilds raft's state from it, joins or bootstraps the cluster as
// configured, and starts serving peers (and the Consensus API when configured). ctx bounds the start only.
func (n *Node) Start(ctx context.Context) error {
	rn, initialConf, err := n.bootstrap(ctx)
	if err != nil {
		n.closeStartFailure()
		return err
	}
	if n.loop, err = newRaftLoop(n, rn, initialConf); err != nil {
		n.closeStartFailure()
		return err
	}
	if err := n.serve(); err != nil {
		n.closeStartFailure()
		return err
	}
	n.wg.Add(5)
	go func() { defer n.wg.Done(); n.reportStalls() }()
	go func() { defer n.wg.Done(); n.loop.run() }()
	go func() { defer n.wg.Done(); n.forwardSnapshotReports() }()
	go func() { defer n.wg.Done(); n.reads.run() }()
	go func() { defer n.wg.Done(); n.publishAttributes() }()
	n.log.Info("consensus member started", "member-id", fmt.Sprintf("%x", n.memberID),
		"cluster-id", fmt.Sprintf("%x", n.clusterID), "peer-urls", n.cfg.InitialAdvertisePeerURLs)
	return nil
}

func (n *Node) closeStartFailure() {
	for _, s := range n.servers {
		s.Stop()
	}
	for _, port := range n.ports {
		_ = port.Close()
	}
	if n.transport != nil {
		n.transport.Stop()
	}
	if n.wal != nil {
		_ = n.wal.Close()
	}
}

// Stop stops the member: a leader first hands leadership to its most up-to-date connected voter (as etcd
// does on shutdown), then the raft loop finishes its current step, the WAL is synced and closed, and every
// call in flight returns ErrGRPCStopped. Stop is safe to call again (or after the member stopped by itself).
func (n *Node) Stop(ctx context.Context) error {
	select {
	case <-n.done:
		return nil
	default:
	}
	n.handOverLeadership(ctx)
	n.shutdown(nil, false)
	select {
	case <-n.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Kill stops the member the way a crash would, for tests: nothing more is sent or synced, and WAL bytes not
// yet synced are lost.
func (n *Node) Kill() { n.shutdown(nil, true) }

// Done is closed once the member has stopped, whether asked to or because it was removed or failed.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err says why the member stopped: nil when asked to, ErrRemoved, or the failure.
func (n *Node) Err() error {
	n.errMu.Lock()
	defer n.errMu.Unlock()
	return n.err
}

// fail stops the member because of err; it returns at once (the loop may be the caller).
func (n *Node) fail(err error) {
	n.log.Error("consensus member stopping", "member-id", fmt.Sprintf("%x", n.memberID), "err", err)
	go n.shutdown(err, false)
}

func (n *Node) shutdown(cause error, crash bool) {
	n.stopOnce.Do(func() {
		n.errMu.Lock()
		n.err = cause
		n.errMu.Unlock()
		close(n.stopping)
		n.wg.Wait()
		if n.transport != nil {
			n.transport.Stop()
		}
		for _, s := range n.servers {
			s.Stop()
		}
		for _, port := range n.ports {
			_ = port.Close()
		}
		if n.wal != nil {
			if crash {
				n.wal.Crash()
			} else if err := n.wal.Close(); err != nil {
				n.log.Error("closing WAL", "err", err)
			}
		}
		close(n.done)
	})
}

// errStopped is what calls made after (or during) the stop return.
var errStopped = rpctypes.ErrGRPCStopped

func (n *Node) stopped() error { return errStopped }

// control runs f in the raft loop and waits for it to be queued (not run). Callers waiting for f's
// result must also watch n.stopping: a stopping loop drops what is queued.
func (n *Node) control(ctx context.Context, f func()) error {
	select {
	case <-n.stopping:
		return n.stopped()
	default:
	}
	select {
	case n.controlC <- f:
		return nil
	case <-n.stopping:
		return n.stopped()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ID is this member's ID.
func (n *Node) ID() uint64 { return n.memberID }

// ClusterID is the cluster's ID.
func (n *Node) ClusterID() uint64 { return n.clusterID }

// Leader is the current leader's ID, 0 when there is none.
func (n *Node) Leader() uint64 { return n.lead.Load() }

// Health is nil when the member has a leader and has published its attributes; for obs.AdminMux.
func (n *Node) Health(context.Context) error {
	select {
	case <-n.done:
		return errors.New("consensus member stopped")
	default:
	}
	if n.lead.Load() == 0 {
		return n.noLeaderError()
	}
	if !n.published.Load() {
		return errors.New("member attributes not yet published")
	}
	return nil
}

// Process implements transport.Raft: it queues a received message for the raft loop.
func (n *Node) Process(ctx context.Context, m *raftpb.Message) error {
	select {
	case n.recvC <- m:
		return nil
	case <-n.stopping:
		return n.stopped()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// IsIDRemoved implements transport.Raft.
func (n *Node) IsIDRemoved(id uint64) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.members.removed[id]
}

// ReportUnreachable implements transport.Raft.
func (n *Node) ReportUnreachable(id uint64) {
	n.controlAsync(func() { n.loop.rn.ReportUnreachable(id) })
}

// snapshotReport is how sending a snapshot to a follower went.
type snapshotReport struct {
	follower uint64
	status   raft.SnapshotStatus
}

// ReportSnapshot implements transport.Raft. Unlike other reports it is never dropped (a leader that never
// hears how a snapshot went would leave that follower waiting for it forever), and it never waits: it is
// queued for forwardSnapshotReports, so the transport never waits on a busy loop, which may itself be
// waiting on the transport.
func (n *Node) ReportSnapshot(id uint64, status raft.SnapshotStatus) {
	n.snapshotReportsMu.Lock()
	n.snapshotReports = append(n.snapshotReports, snapshotReport{follower: id, status: status})
	n.snapshotReportsMu.Unlock()
	select {
	case n.snapshotReported <- struct{}{}:
	default:
	}
}

// forwardSnapshotReports hands queued snapshot reports to the loop, in order, until the member stops.
func (n *Node) forwardSnapshotReports() {
	for {
		select {
		case <-n.stopping:
			return
		case <-n.snapshotReported:
		}
		n.snapshotReportsMu.Lock()
		reports := n.snapshotReports
		n.snapshotReports = nil
		n.snapshotReportsMu.Unlock()
		for _, r := range reports {
			if n.control(context.Background(), func() { n.loop.rn.ReportSnapshot(r.follower, r.status) }) != nil {
				return // stopping
			}
		}
	}
}

// ReportRemoved implements transport.Raft: a peer refused this member as removed, so it stops.
func (n *Node) ReportRemoved() {
	n.log.Warn("a peer says this member was removed from the cluster; stopping", "member-id", fmt.Sprintf("%x", n.memberID))
	go n.shutdown(ErrRemoved, false)
}

// controlAsync queues f for the loop without waiting; when the queue is full the report is dropped, which
// raft tolerates (it only speeds up recovery).
func (n *Node) controlAsync(f func()) {
	select {
	case n.controlC <- f:
	default:
	}
}

// publishSoftState records who leads, as the loop learns it.
func (n *Node) publishSoftState(ss *raft.SoftState) {
	leader := ss.RaftState == raft.StateLeader
	if n.isLeader.Swap(leader) != leader && n.transport != nil {
		n.transport.LeadershipChanged()
	}
	n.metrics.isLeader.Set(boolGauge(leader))
	if old := n.lead.Swap(ss.Lead); old != ss.Lead {
		n.metrics.hasLeader.Set(boolGauge(ss.Lead != 0))
		if ss.Lead != 0 {
			n.metrics.leaderChanges.Inc()
		}
		n.log.Info("leader changed", "member-id", fmt.Sprintf("%x", n.memberID), "leader", fmt.Sprintf("%x", ss.Lead),
			"previous-leader", fmt.Sprintf("%x", old), "term", n.term.Load())
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
