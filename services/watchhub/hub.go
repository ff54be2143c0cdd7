package watchhub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/rpctune"
	"github.com/cairn-kv/cairn/internal/storageclient"
	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// Hub is one watchhub. Build it with New, run it with Start, end it with Stop.
type Hub struct {
	// guard refuses callers other than the frontends while authentication is enabled (package relayauth).
	guard   *relayauth.Guard
	cfg     Config
	deps    Deps
	tel     *obs.Telemetry
	stages  obs.StageTracer
	logger  *slog.Logger
	metrics *metrics
	pool    *storageclient.Pool
	feed    *feed
	fresh   *freshness
	lag     lagPolicy // what becomes of watchers that cannot keep up (lag.go)
	chunks  chunkPool // the streams' outbox chunks (outbox.go)
	// relayBuffers are the relay batches' buffers (relaybatch.go): each goes back once gRPC has written it.
	relayBuffers wiremsg.Pool

	// mu guards the window, the groups, every watcher's state and group membership, and every stream's
	// watchers. Lock order: mu before any stream's mu.
	mu         sync.RWMutex
	win        *window
	groups     *groupIndex
	fan        fanOutShards // how deliver splits its work (fanout.go)
	compactRev int64
	header     pb.ResponseHeader // cluster, member and term of the storage last heard from; Revision unused
	streams    map[*stream]struct{}
	// leaderless is closed once storage has reported no leader for leaderLostAfter; streams that require a
	// leader end then, as etcd ends them. noLeaderSince is when the current leaderless spell began.
	leaderless      chan struct{}
	noLeaderSince   time.Time
	leaderLostAfter time.Duration

	// headRev mirrors win.head for readers that must not take mu; headAdvanced is closed and replaced
	// (under headMu) whenever it grows.
	headRev     atomic.Int64
	streamCount atomic.Int64  // len(streams), for readers without mu (see interest.go)
	streamSeq   atomic.Int64  // streams opened, to give each its fan-out shard
	firstStream chan struct{} // signalled when the first stream opens
	// waking is open from the first stream's wake until the feed has caught up on it (catchUp), and nil
	// otherwise; creates wait for it (freshness.await). Guarded by headMu.
	waking       chan struct{}
	headMu       sync.Mutex
	headAdvanced chan struct{}
	ready        chan struct{} // closed once the head is known
	readyOnce    sync.Once

	nc         *nats.Conn
	sub        *nats.Subscription
	grpcServer *grpc.Server
	health     *health.Server
	listener   net.Listener
	admin      *obs.AdminServer
	cancel     context.CancelFunc
	done       sync.WaitGroup // the gRPC server, the feed, freshness and the interest announcer
	senders    sync.WaitGroup // every stream's sender
	stopping   chan struct{}
	stopOnce   sync.Once
	stopErr    error
}

// New checks cfg and prepares the hub; nothing runs until Start.
func New(cfg Config, deps Deps) (*Hub, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("watchhub config: %w", err)
	}
	relaySecret, err := cfg.SecretConfig.Resolve()
	if err != nil {
		return nil, fmt.Errorf("watchhub config: %w", err)
	}
	deps = deps.withDefaults()
	tel, logger := deps.Telemetry, deps.Logger
	h := &Hub{
		cfg: cfg, deps: deps, tel: tel, stages: tel.Stages("watchhub", cfg.ListenURL), logger: logger,
		groups: newGroupIndex(runtime.GOMAXPROCS(0)), fan: newFanOutShards(runtime.GOMAXPROCS(0)),
		streams: map[*stream]struct{}{}, ready: make(chan struct{}), firstStream: make(chan struct{}, 1),
		stopping: make(chan struct{}), headAdvanced: make(chan struct{}), leaderless: make(chan struct{}),
		leaderLostAfter: defaultLeaderLostAfter, lag: lagPolicy{epoch: time.Now(), bound: cfg.MaxWatchLag},
		guard: relayauth.NewGuard(relaySecret, deps.Internal.Enabled()),
	}
	h.metrics = newMetrics(deps.Registry)
	pool, err := newStoragePool(cfg, tel, deps)
	if err != nil {
		return nil, err
	}
	h.pool = pool
	h.guard.SetRefresh(h.readAuthEnabled)
	h.feed = newFeed(h)
	h.fresh = newFreshness(h)
	return h, nil
}

// Start serves the Watch API (and the admin endpoint, if configured), subscribes to the bus and starts
// following the store. Watch requests wait until the hub knows the store's revision.
func (h *Hub) Start(ctx context.Context) error {
	lis, err := config.Listen(h.deps.Listener, h.cfg.ListenURL)
	if err != nil {
		return fmt.Errorf("watchhub: %w", err)
	}
	h.listener = lis
	nc, err := eventbus.Connect(h.cfg.NATSURL, "cairn-watchhub", h.logger, h.deps.Internal,
		eventbus.NkeySeedFile(h.cfg.NATSNkeySeedFile))
	if err != nil {
		_ = lis.Close()
		return err
	}
	h.nc = nc
	sub, err := eventbus.SubscribeFirstCopies(nc, h.cfg.SubjectPrefix, h.watched, h.feed.onRecord)
	if err != nil {
		nc.Close()
		_ = lis.Close()
		return err
	}
	h.sub = sub
	h.grpcServer = grpc.NewServer(h.serverOptions()...)
	pb.RegisterWatchServer(h.grpcServer, &watchServer{hub: h})
	h.health = health.NewServer()
	h.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(h.grpcServer, h.health)
	h.done.Go(func() { // Stop stops the server before it waits for done
		if err := h.grpcServer.Serve(h.deps.Internal.Listener(lis, "watchhub")); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			h.logger.Error("watchhub gRPC server stopped", "addr", lis.Addr().String(), "err", err)
		}
	})
	if h.cfg.AdminAddr != "" {
		admin, err := obs.ListenAdmin(h.cfg.AdminAddr, obs.AdminMux(h.metrics.registry, h.Health), h.logger)
		if err != nil {
			h.grpcServer.Stop()
			nc.Close()
			return err
		}
		h.admin = admin
		admin.Start()
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.cancel = cancel
	h.done.Add(3)
	go func() { defer h.done.Done(); h.feed.run(runCtx) }()
	go func() { defer h.done.Done(); h.fresh.run(runCtx) }()
	go func() { defer h.done.Done(); h.announceInterest(runCtx) }()
	h.logger.Info("watchhub started", "url", h.URL(), "storage", h.cfg.StorageEndpoints, "nats", h.cfg.NATSURL)
	return nil
}

// serverOptions are etcd's gRPC server settings for the Watch service, with otelgrpc and the hub's codec.
func (h *Hub) serverOptions() []grpc.ServerOption {
	return append(append(append(h.tel.ServerOptions(), rpctune.ServerOptions()...), h.guard.ServerOptions()...),
		grpc.ForceServerCodecV2(newCodec()),
		grpc.MaxRecvMsgSize(h.cfg.fragmentBytes()),
		grpc.MaxSendMsgSize(1<<31-1),
		grpc.MaxConcurrentStreams(1<<32-1),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: false}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Hour, Timeout: 20 * time.Second}),
	)
}

// URL is the http:// URL the Watch API is served on (with the real port once started).
func (h *Hub) URL() string {
	if h.listener == nil {
		return h.cfg.ListenURL
	}
	return "http://" + h.listener.Addr().String()
}

// Addr is the host:port the Watch API is served on, for gRPC clients.
func (h *Hub) Addr() string {
	if h.listener == nil {
		addr, _ := config.HostPort(h.cfg.ListenURL)
		return addr
	}
	return h.listener.Addr().String()
}

// AdminAddr is the bound admin address, or "" when none is served.
func (h *Hub) AdminAddr() string {
	if h.admin == nil {
		return ""
	}
	return h.admin.Addr()
}

// Registry is the hub's Prometheus registry, served on /metrics.
func (h *Hub) Registry() *prometheus.Registry { return h.metrics.registry }

// Stop ends every Watch stream (clients resume on another hub), leaves the bus and stops following the store.
// Stopping the gRPC server cancels every stream, so the streams' senders end at once; Stop waits for them a
// few seconds at most, whatever ctx allows (a caller that spent its budget elsewhere still gets a clean stop).
// Stop is safe to call more than once: later calls wait for the first and return its result.
func (h *Hub) Stop(ctx context.Context) error {
	h.stopOnce.Do(func() { h.stopErr = h.stop(ctx) })
	return h.stopErr
}

func (h *Hub) stop(ctx context.Context) error {
	close(h.stopping)
	if h.grpcServer != nil {
		h.grpcServer.Stop() // streams never end by themselves: do not wait for them
	}
	if h.admin != nil {
		_ = h.admin.Stop(ctx)
	}
	if h.cancel != nil {
		h.cancel()
	}
	if h.nc != nil {
		h.nc.Close()
	}
	h.done.Wait()
	waited := make(chan struct{})
	go func() { h.senders.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(senderStopGrace):
		h.logger.Error("watchhub stop: stream senders still running", "after", senderStopGrace)
	}
	err := h.pool.Close()
	h.logger.Info("watchhub stopped", "head", h.headRev.Load())
	return err
}

// senderStopGrace bounds Stop's wait for the stream senders.
const senderStopGrace = 5 * time.Second

// Health reports why the hub cannot serve, if it cannot.
func (h *Hub) Health(context.Context) error {
	select {
	case <-h.ready:
	default:
		return errors.New("watchhub has not yet learned the store's revision from storage")
	}
	return h.feed.health()
}

// waitReady waits until the hub knows the store's revision.
func (h *Hub) waitReady(ctx context.Context) error {
	select {
	case <-h.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-h.stopping:
		return errors.New("watchhub stopping")
	}
}

// initialize sets the head the hub starts from; called once by the feed.
func (h *Hub) initialize(head, compactRev int64) {
	h.mu.Lock()
	h.win = newWindow(head, h.cfg.WindowRevisions, h.cfg.WindowBytes)
	h.compactRev = compactRev
	h.headRev.Store(head)
	h.metrics.head.Set(float64(head))
	h.mu.Unlock()
	h.readyOnce.Do(func() { close(h.ready) })
	h.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.logger.Info("watchhub following the store", "head", head, "compact_revision", compactRev)
}

// responseHeader is the header of a response at rev; mu must be held.
func (h *Hub) responseHeader(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: h.header.ClusterId, MemberId: h.header.MemberId, Revision: rev,
		RaftTerm: h.header.RaftTerm}
}

// readAuthEnabled reads from a storage whether authentication is enabled, for the relay guard: the feed's polls
// tell it too, but while the store stands still they come only every few seconds (relayauth.Guard.SetRefresh).
func (h *Hub) readAuthEnabled(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StorageTimeout)
	defer cancel()
	return h.pool.Do(ctx, func(ctx context.Context, c *storageclient.Client) error {
		st, err := c.Status(ctx)
		if err == nil {
			h.guard.SetAuthEnabled(st.AuthEnabled)
		}
		return err
	})
}

// defaultLeaderLostAfter is how long storage must report no leader before streams that require one end (etcd:
// three election timeouts).
const defaultLeaderLostAfter = 3 * time.Second

// noteStorage records what a storage's status said of the cluster (the header fields of responses), its
// leader, and the highest compact revision any storage reported.
func (h *Hub) noteStorage(st *storagepb.StatusResponse, compactRev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.header.ClusterId, h.header.MemberId, h.header.RaftTerm = st.ClusterId, st.MemberId, st.RaftTerm
	h.guard.SetAuthEnabled(st.AuthEnabled)
	h.compactRev = max(h.compactRev, compactRev)
	switch {
	case st.Leader != 0:
		h.noLeaderSince = time.Time{}
		select {
		case <-h.leaderless:
			h.leaderless = make(chan struct{})
		default:
		}
	case h.noLeaderSince.IsZero():
		h.noLeaderSince = time.Now()
	case time.Since(h.noLeaderSince) > h.leaderLostAfter:
		select {
		case <-h.leaderless:
		default:
			close(h.leaderless)
			h.logger.Warn("storage reports no leader; ending the watch streams that require one",
				"since", h.noLeaderSince)
		}
	}
}

// leaderLost returns a channel closed while the cluster is without a leader for too long, or nil when a
// leader is known.
func (h *Hub) leaderLost() <-chan struct{} {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.leaderless
}

// hasNoLeader reports whether storage last reported no leader.
func (h *Hub) hasNoLeader() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return !h.noLeaderSince.IsZero()
}

// noteCompacted records a compaction seen on the bus.
func (h *Hub) noteCompacted(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.compactRev = max(h.compactRev, rev)
}

// fallBehind moves a synced watcher to catch-up from rev; mu is held.
func (h *Hub) fallBehind(w *watcher, rev int64) {
	h.groups.leave(w)
	h.setState(w, stateCatchingUp)
	w.stream.queueCatchUp(w, rev)
	h.metrics.fellBehind.Inc()
}

// setState moves w to state, keeping the watcher gauges; mu is held.
func (h *Hub) setState(w *watcher, state watcherState) {
	h.metrics.leaveState(w.state)
	w.state = state
	h.metrics.enterState(state)
}

// skipCompacted is the hub's answer to having been away so long that the revisions it lacks were compacted:
// it cannot deliver [head+1, compactRev), so every synced watcher is canceled as compacted (as etcd cancels a
// watcher that must start below the compact revision), and the hub resumes from compactRev.
func (h *Hub) skipCompacted(compactRev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.compactRev = max(h.compactRev, compactRev)
	for _, g := range h.groups.byKey {
		for _, ws := range g.shards {
			for i := len(ws) - 1; i >= 0; i-- {
				h.fallBehind(ws[i], h.win.head+1) // catch-up finds it compacted and cancels it
			}
		}
	}
	h.win.reset(compactRev - 1)
	h.headRev.Store(compactRev - 1)
	h.logger.Warn("watchhub lost revisions to compaction; synced watchers canceled as compacted",
		"compact_revision", compactRev)
}
