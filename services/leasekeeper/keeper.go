package leasekeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cairn-kv/cairn/api/eventpb"
	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/rpctune"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// revokeWorkers is how many revokes of expired leases are in flight at once.
const revokeWorkers = 16

// Keeper is one leasekeeper: active (it runs the lease clock and serves the Lease API) or standby (it follows the
// leases and the claim, and answers clients with keeperclaim.ErrNotActive). Build it with New, run it with Start,
// end it with Stop.
type Keeper struct {
	// guard refuses callers other than the frontends while authentication is enabled (package relayauth).
	guard   *relayauth.Guard
	cfg     Config
	deps    Deps
	id      string
	tel     *obs.Telemetry
	stages  obs.StageTracer
	logger  *slog.Logger
	metrics *metrics
	table   *table
	pool    *storageclient.Pool
	// peers, with Config.PeerURLs, are asked whether the claim's holder is alive; nil: the holder renews its
	// claim through the log.
	peers *peers

	role roleState
	// pauseElection stops renewing and watching the claim (tests: a keeper cut off from storage's claim).
	pauseElection atomic.Bool
	lastRevision  atomic.Int64 // the newest store revision seen, for response headers
	// lastCall is when the last Lease API call came (unix nanoseconds): a holder dozes only after dozeAfter
	// without one. wakeMu lets one call at a time wake a dormant holder.
	lastCall atomic.Int64
	wakeMu   sync.Mutex
	woken    chan struct{} // a call woke the dormant holder: its election loop confirms again

	revokeC     chan int64
	resetC      chan *resetRequest
	revokeLimit *rate.Limiter

	// stopping is closed when the keeper stops; nothing in flight waits on its loops after that.
	stopping   chan struct{}
	stopOnce   sync.Once
	endOnce    sync.Once // Stop or Crash: whichever comes first ends the keeper
	endErr     error
	nc         *nats.Conn
	sub        *nats.Subscription
	grpcServer *grpc.Server
	listener   net.Listener
	admin      *obs.AdminServer
	cancel     context.CancelFunc
	done       sync.WaitGroup // the keeper's loops
	serving    sync.WaitGroup // the gRPC server, stopped after the loops
}

// roleState is whether this keeper holds the claim, at which epoch, and until when it may serve.
type roleState struct {
	mu          sync.Mutex
	holder      bool
	epoch       uint64
	activeUntil time.Time
	// dormant (with peers) is set while the holder has no lease and no call to serve and so stops confirming
	// its claim: it serves again after one confirmation, which the next call sends (see servingEpoch).
	dormant bool
}

// New prepares a keeper; nothing runs until Start.
func New(cfg Config, deps Deps) (*Keeper, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("leasekeeper config: %w", err)
	}
	relaySecret, err := cfg.SecretConfig.Resolve()
	if err != nil {
		return nil, fmt.Errorf("leasekeeper config: %w", err)
	}
	deps = deps.withDefaults()
	tel, logger := deps.Telemetry, deps.Logger
	id := keeperID(cfg.Name)
	k := &Keeper{
		cfg: cfg, deps: deps, id: id, tel: tel, stages: tel.Stages("leasekeeper", cfg.Name), logger: logger.With("keeper", id),
		table:   newTable(cfg.CheckpointInterval),
		revokeC: make(chan int64, cfg.RevokeRate),
		resetC:  make(chan *resetRequest, cfg.CheckpointBatch),
		// The bucket holds two expiry ticks of revokes, so a late tick loses none of the rate.
		revokeLimit: rate.NewLimiter(rate.Limit(cfg.RevokeRate), max(1, int(2*float64(cfg.RevokeRate)*cfg.ExpiryTick.Seconds()))),
		stopping:    make(chan struct{}),
		woken:       make(chan struct{}, 1),
		guard:       relayauth.NewGuard(relaySecret, deps.Internal.Enabled()),
	}
	k.metrics = newMetrics(k)
	// Calls go to the storage that last answered and fail over only when one cannot serve at all.
	dialOptions := tel.DialOptions()
	if deps.Dialer != nil {
		dialOptions = append(dialOptions, grpc.WithContextDialer(deps.Dialer))
	}
	pool, err := storageclient.NewPool(storageclient.PoolConfig{Endpoints: cfg.StorageEndpoints,
		DialOptions: dialOptions, TLS: deps.Internal, FailsOver: storageclient.FailsOverUnavailable, Logger: k.logger})
	if err != nil {
		return nil, fmt.Errorf("leasekeeper: %w", err)
	}
	k.pool = pool
	k.guard.SetRefresh(k.readAuthEnabled)
	if len(cfg.PeerURLs) > 0 {
		if k.peers, err = dialPeers(cfg.PeerURLs, k.peerDialOptions(relaySecret), k.peerDialer()); err != nil {
			_ = pool.Close()
			return nil, err
		}
	}
	return k, nil
}

// Active reports whether this keeper is the active one now: it holds the claim and may serve, or (dormant)
// serves after one confirmation of its claim.
func (k *Keeper) Active() bool {
	k.role.mu.Lock()
	defer k.role.mu.Unlock()
	return k.role.holder && (k.role.dormant || time.Now().Before(k.role.activeUntil))
}

// ID is this keeper's claimant ID (its name plus a random suffix).
func (k *Keeper) ID() string { return k.id }

// subscribedWait is how long Start waits for the NATS server to confirm the keeper's subscription.
const subscribedWait = time.Second

// Start connects to the bus, loads the leases from storage, serves the Lease API and starts following the
// claim: the keeper becomes active when it wins it.
func (k *Keeper) Start(ctx context.Context) error {
	natsOptions := []nats.Option{eventbus.NkeySeedFile(k.cfg.NATSNkeySeedFile)}
	if k.deps.Dialer != nil {
		natsOptions = append(natsOptions, eventbus.DialWith(k.deps.Dialer))
	}
	nc, err := eventbus.Connect(k.cfg.NATSURL, k.id, k.logger, k.deps.Internal, natsOptions...)
	if err != nil {
		return err
	}
	k.nc = nc
	if k.sub, err = eventbus.SubscribeLeaseChanges(nc, k.cfg.SubjectPrefix, k.onRecord); err != nil {
		nc.Close()
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k.cancel = cancel
	// The load below must not miss a lease change applied just after it: the server has the subscription first.
	if err := eventbus.Confirm(ctx, nc, subscribedWait); err != nil {
		k.logger.Warn("leasekeeper loads leases before the bus answers; reconciliation fills what it misses", "nats", k.cfg.NATSURL, "err", err)
	}
	if err := k.reconcile(ctx); err != nil {
		k.logger.Warn("initial lease load failed; reconciliation will retry", "err", err)
	}
	lis, err := config.Listen(k.deps.Listener, k.cfg.ListenURL)
	if err != nil {
		cancel()
		nc.Close()
		return fmt.Errorf("leasekeeper: %w", err)
	}
	k.listener = lis
	k.grpcServer = grpc.NewServer(append(append(k.tel.ServerOptions(), rpctune.ServerOptions()...), k.guard.ServerOptions()...)...)
	pb.RegisterLeaseServer(k.grpcServer, &server{k: k})
	healthpb.RegisterHealthServer(k.grpcServer, livenessServer{k: k})
	k.serving.Go(func() {
		if err := k.grpcServer.Serve(k.deps.Internal.Listener(lis, "leasekeeper")); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			k.logger.Error("leasekeeper gRPC server stopped", "addr", lis.Addr().String(), "err", err)
		}
	})
	if k.cfg.AdminAddr != "" {
		if k.admin, err = obs.ListenAdmin(k.cfg.AdminAddr, obs.AdminMux(k.metrics.registry, k.Health), k.logger); err != nil {
			k.Crash()
			return err
		}
		k.admin.Start()
	}
	k.run(runCtx, k.runElection, k.runExpiry, k.runCheckpoints, k.runResets, k.runReconcile, k.runAuthPoll)
	for range revokeWorkers {
		k.run(runCtx, k.runRevokes)
	}
	k.logger.Info("leasekeeper started", "url", k.URL(), "storage", k.cfg.StorageEndpoints, "nats", k.cfg.NATSURL,
		"leases", k.table.count())
	return nil
}

func (k *Keeper) run(ctx context.Context, loops ...func(context.Context)) {
	for _, loop := range loops {
		k.done.Add(1)
		go func() { defer k.done.Done(); loop(ctx) }()
	}
}

// URL is the http:// URL the Lease service is served on (with the real port once started).
func (k *Keeper) URL() string {
	if k.listener == nil {
		return k.cfg.ListenURL
	}
	return "http://" + k.listener.Addr().String()
}

// AdminAddr is the bound admin address, or "" when none is served.
func (k *Keeper) AdminAddr() string {
	if k.admin == nil {
		return ""
	}
	return k.admin.Addr()
}

// Stop stops serving and, if this keeper is active, releases the claim so a standby takes over at once. Lease
// calls in flight and open keep-alive streams are answered with keeperclaim.ErrNotActive or cut. Stop (and
// Crash) may be called more than once: only the first call stops the keeper, later ones return its result.
func (k *Keeper) Stop(ctx context.Context) error {
	k.endOnce.Do(func() { k.endErr = k.stop(ctx) })
	return k.endErr
}

func (k *Keeper) stop(ctx context.Context) error {
	epoch, holder := k.stepDown()
	k.stopOnce.Do(func() { close(k.stopping) })
	if k.cancel != nil {
		k.cancel()
	}
	k.done.Wait() // no revoke or checkpoint of this keeper is in flight past here
	var err error
	if holder {
		err = k.release(ctx, epoch)
	}
	if k.grpcServer != nil {
		k.grpcServer.Stop()
		k.serving.Wait()
	}
	k.closeConnections(ctx)
	k.logger.Info("leasekeeper stopped", "released_epoch", epoch, "err", err)
	return err
}

// Crash stops everything at once without releasing the claim, as a crash would: a standby takes over only after
// its takeover timeout. For fault tests.
func (k *Keeper) Crash() { k.endOnce.Do(k.crash) }

func (k *Keeper) crash() {
	if k.grpcServer != nil {
		k.grpcServer.Stop()
		k.serving.Wait()
	}
	k.stepDown()
	k.stopOnce.Do(func() { close(k.stopping) })
	if k.cancel != nil {
		k.cancel()
	}
	k.done.Wait()
	k.closeConnections(context.Background())
}

func (k *Keeper) closeConnections(ctx context.Context) {
	if k.admin != nil {
		_ = k.admin.Stop(ctx)
	}
	if k.nc != nil {
		k.nc.Close()
	}
	_ = k.pool.Close()
	if k.peers != nil {
		k.peers.close()
	}
}

// onRecord applies one applied record from the bus.
func (k *Keeper) onRecord(rec *eventpb.AppliedRecord, _ eventbus.Meta) {
	k.noteRevision(rec.Revision)
	if len(rec.Leases) > 0 {
		k.table.applyRecord(rec, time.Now())
	}
}

func (k *Keeper) noteRevision(rev int64) {
	for {
		cur := k.lastRevision.Load()
		if rev <= cur || k.lastRevision.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// Health is the admin /health check: the bus must be connected (a standby is healthy too).
func (k *Keeper) Health(context.Context) error {
	if k.nc == nil || !k.nc.IsConnected() {
		return errors.New("event bus not connected")
	}
	return nil
}

// activeEpoch returns the epoch to fence writes with, if this keeper may act as the active one now.
func (k *Keeper) activeEpoch(now time.Time) (uint64, bool) {
	k.role.mu.Lock()
	defer k.role.mu.Unlock()
	return k.role.epoch, k.role.holder && now.Before(k.role.activeUntil)
}

// stepDown stops acting as the active keeper at once; it returns the epoch held, if any.
func (k *Keeper) stepDown() (uint64, bool) {
	k.role.mu.Lock()
	epoch, holder := k.role.epoch, k.role.holder
	k.role.holder, k.role.epoch, k.role.activeUntil, k.role.dormant = false, 0, time.Time{}, false
	k.role.mu.Unlock()
	if holder {
		k.table.demote()
		k.metrics.active.Set(0)
	}
	return epoch, holder
}
