package frontend

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soheilhy/cmux"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/cairn-kv/cairn/api/v3electionpb"
	"github.com/cairn-kv/cairn/api/v3lockpb"
	"github.com/cairn-kv/cairn/internal/authtoken"
	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/link"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/rpctune"
	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// Frontend is one stateless frontend: etcd's gRPC API, the JSON gateway and the admin endpoints on the client
// URLs, routing to a pool of storage, consensus, watchhub and leasekeeper replicas.
type Frontend struct {
	cfg     Config
	deps    Deps
	tel     *obs.Telemetry
	logger  *slog.Logger
	pool    *pool
	metrics *metrics
	watch   *rotation
	lease   *rotation

	grpcServer  *grpc.Server
	listeners   []net.Listener
	secure      []bool // listeners[i] serves TLS: its client URL is https
	muxes       []cmux.CMux
	httpServers []*http.Server
	gatewayConn *grpc.ClientConn
	cancel      context.CancelFunc
	done        sync.WaitGroup
	// stopping is closed when Stop begins: relayed Watch streams end then (with Unavailable, so clients
	// resume elsewhere) instead of holding the graceful stop until its deadline.
	stopping     chan struct{}
	stoppingOnce sync.Once

	// self is an etcd client of this frontend's own gRPC server (Lock and Election use it), set by Start.
	self atomic.Pointer[clientv3.Client]
	// health is grpc.health.v1 on the client ports: SERVING while the frontend knows a leader.
	health *health.Server
	// auth is the auth store's copy and the token provider every request is checked with.
	auth *authGate
}

// New checks cfg and prepares the frontend (connections are opened in the background); nothing is served
// until Start.
func New(cfg Config, deps Deps) (*Frontend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("frontend config: %w", err)
	}
	relaySecret, err := cfg.SecretConfig.Resolve()
	if err != nil {
		return nil, fmt.Errorf("frontend config: %w", err)
	}
	deps = deps.withDefaults()
	tel, logger := deps.Telemetry, deps.Logger
	f := &Frontend{cfg: cfg, deps: deps, tel: tel, logger: logger, stopping: make(chan struct{})}
	if f.pool, err = newPool(cfg, tel, logger, deps.Internal); err != nil {
		return nil, err
	}
	relay := relayauth.DialOption(relaySecret)
	watchhubs, err := dialBackends(cfg.WatchEndpoints, append(tel.DialOptions(), deps.Internal.DialOption(), relay,
		grpc.WithInitialWindowSize(watchRelayWindow)))
	if err != nil {
		f.pool.close()
		return nil, fmt.Errorf("watch endpoints: %w", err)
	}
	leasekeepers, err := dialBackends(cfg.LeaseEndpoints, append(tel.DialOptions(), deps.Internal.DialOption(), relay))
	if err != nil {
		f.pool.close()
		closeBackends(watchhubs)
		return nil, fmt.Errorf("lease endpoints: %w", err)
	}
	f.watch, f.lease = &rotation{backends: watchhubs}, &rotation{backends: leasekeepers}
	f.metrics = newMetrics(f)
	tokens, err := authtoken.New(cfg.AuthToken, time.Duration(cfg.AuthTokenTTL)*time.Second, time.Now)
	if err != nil {
		f.pool.close()
		closeBackends(watchhubs)
		closeBackends(leasekeepers)
		return nil, fmt.Errorf("--auth-token: %w", err)
	}
	f.auth = newAuthGate(f, tokens)
	f.health = health.NewServer()
	f.pool.published = f.viewPublished
	f.publishHealth(f.pool.view())
	f.grpcServer = f.newGRPCServer()
	return f, nil
}

// newGRPCServer builds the gRPC server with etcd's limits and keepalive policy.
func (f *Frontend) newGRPCServer() *grpc.Server {
	kv := &kvServer{f: f}
	s := grpc.NewServer(f.serverOptions(kv)...)
	pb.RegisterKVServer(s, kv)
	pb.RegisterClusterServer(s, &clusterServer{f: f})
	pb.RegisterMaintenanceServer(s, &maintenanceServer{f: f})
	pb.RegisterAuthServer(s, &authServer{f: f})
	pb.RegisterWatchServer(s, &watchServer{hubs: f.watch, stopping: f.stopping, auth: f.auth,
		stages: f.tel.Stages("frontend", f.cfg.Name), canceledForLag: f.metrics.watchLagCanceled,
		lagWarnings: &lagWarnings{logger: f.logger}, relayLag: f.metrics.watchRelayLag})
	pb.RegisterLeaseServer(s, &leaseServer{keepers: f.lease, completeHeader: f.completeHeader, auth: f.auth,
		handoverWait: f.cfg.RequestTimeout})
	recipes := &recipes{client: f.self.Load, mint: f.auth.mint}
	v3lockpb.RegisterLockServer(s, recipes)
	v3electionpb.RegisterElectionServer(s, recipes)
	healthpb.RegisterHealthServer(s, f.health)
	f.metrics.grpc.InitializeMetrics(s) // every method's series from the start, as etcd's
	return s
}

// serverOptions are the client port's gRPC server options: transport settings, etcd's limits, keepalive
// policy, and the interceptors every call goes through (tracing, metrics, auth, and kv's Range relay).
func (f *Frontend) serverOptions(kv *kvServer) []grpc.ServerOption {
	return append(append(append(f.tel.StagedServerOptions(f.tel.Stages("frontend", f.cfg.Name), requestOp), rpctune.ClientServerOptions()...), link.PlainServerOptions()...),
		grpc.ForceServerCodecV2(countingCodec{CodecV2: wiremsg.NewCodec(), bytes: f.metrics.bytes}),
		grpc.MaxRecvMsgSize(int(f.cfg.MaxRequestBytes)+grpcOverheadBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(math.MaxUint32),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Hour, Timeout: 20 * time.Second}),
		grpc.ChainUnaryInterceptor(f.metrics.grpc.UnaryServerInterceptor(), f.metrics.unaryInterceptor,
			f.auth.unaryInterceptor, kv.relayRange),
		grpc.ChainStreamInterceptor(f.metrics.grpc.StreamServerInterceptor(), f.auth.streamInterceptor),
		grpc.Creds(clientPortCredentials{}),
	)
}

// Start binds the client and metrics URLs, serves gRPC and HTTP on each client URL (split by cmux, as etcd
// does), probes the replicas once and keeps probing in the background.
func (f *Frontend) Start(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.cancel = cancel
	probeCtx, probeCancel := context.WithTimeout(ctx, 2*time.Second)
	f.pool.probe(probeCtx)
	probeCancel()
	f.done.Go(func() { f.pool.run(runCtx) })
	f.done.Go(func() { f.auth.run(runCtx) })
	authCtx, authCancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := f.auth.refresh(authCtx); err != nil { // requests wait for it (errAuthUnknown) until it is read
		f.logger.Warn("auth store not read at start; retrying in the background", "err", err)
	}
	authCancel()
	if err := f.listen(); err != nil {
		_ = f.Stop(ctx)
		return err
	}
	gateway, err := f.newGateway(runCtx)
	if err != nil {
		_ = f.Stop(ctx)
		return err
	}
	clientMux := f.adminMux()
	clientMux.Handle("/v3/", gateway)
	var tlsConfig *tls.Config
	if slices.Contains(f.secure, true) {
		if tlsConfig, err = f.cfg.TLS.ClientPortConfig(f.cfg.TLSPolicy); err != nil {
			_ = f.Stop(ctx)
			return err
		}
	}
	for i, lis := range f.listeners {
		if f.secure[i] {
			if err := f.serveTLS(lis, tlsConfig, clientMux); err != nil {
				_ = f.Stop(ctx)
				return err
			}
			continue
		}
		m := cmux.New(lis) // as etcd splits a plain client port: HTTP/2 to gRPC, HTTP/1 to the gateway
		grpcL, httpL := m.Match(cmux.HTTP2()), m.Match(cmux.HTTP1())
		srv := &http.Server{Handler: clientMux, ReadHeaderTimeout: 5 * time.Minute}
		f.muxes, f.httpServers = append(f.muxes, m), append(f.httpServers, srv)
		f.serve("grpc", lis, func() error { return f.grpcServer.Serve(grpcL) })
		f.serve("http", lis, func() error { return srv.Serve(httpL) })
		f.serve("cmux", lis, m.Serve)
	}
	metricsListeners, err := f.listenMetrics()
	if err != nil {
		_ = f.Stop(ctx)
		return err
	}
	for _, lis := range metricsListeners {
		srv := &http.Server{Handler: f.adminMux(), ReadHeaderTimeout: 10 * time.Second}
		f.httpServers = append(f.httpServers, srv)
		f.serve("metrics", lis, func() error { return srv.Serve(lis) })
	}
	f.logger.Info("frontend started", "name", f.cfg.Name, "client_urls", f.ClientURLs(),
		"consensus_endpoints", f.cfg.ConsensusEndpoints, "storage_endpoints", f.cfg.StorageEndpoints,
		"watch_endpoints", f.cfg.WatchEndpoints, "lease_endpoints", f.cfg.LeaseEndpoints)
	return nil
}

// listenMetrics returns the metrics listeners the caller bound, or binds ListenMetricsURLs.
func (f *Frontend) listenMetrics() ([]net.Listener, error) {
	if len(f.deps.MetricsListeners) > 0 {
		return f.deps.MetricsListeners, nil
	}
	var listeners []net.Listener
	for _, u := range f.cfg.ListenMetricsURLs {
		lis, err := config.Listen(nil, u)
		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return nil, fmt.Errorf("metrics listener: %w", err)
		}
		listeners = append(listeners, lis)
	}
	return listeners, nil
}

func (f *Frontend) listen() error {
	secure := func(i int) bool {
		_, https, _ := config.ClientHostPort(f.cfg.ListenClientURLs[min(i, len(f.cfg.ListenClientURLs)-1)])
		return https
	}
	if len(f.deps.ClientListeners) > 0 {
		for i, lis := range f.deps.ClientListeners {
			f.listeners, f.secure = append(f.listeners, lis), append(f.secure, secure(i))
		}
		return nil
	}
	for i, u := range f.cfg.ListenClientURLs {
		addr, _, _ := config.ClientHostPort(u)
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("client listener on %s: %w", u, err)
		}
		f.listeners, f.secure = append(f.listeners, lis), append(f.secure, secure(i))
	}
	return nil
}

// serve runs one server loop until it is stopped, logging an unexpected end.
func (f *Frontend) serve(what string, lis net.Listener, run func() error) {
	f.done.Go(func() {
		err := run()
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, http.ErrServerClosed) &&
			!errors.Is(err, cmux.ErrListenerClosed) && !errors.Is(err, cmux.ErrServerClosed) &&
			!errors.Is(err, net.ErrClosed) {
			f.logger.Error("frontend server stopped", "server", what, "addr", lis.Addr().String(), "err", err)
		}
	})
}

// ClientURLs are the bound client URLs, with the real ports when port 0 was asked for.
func (f *Frontend) ClientURLs() []string {
	if len(f.listeners) == 0 {
		return f.cfg.ListenClientURLs
	}
	urls := make([]string, len(f.listeners))
	for i, lis := range f.listeners {
		scheme := "http://"
		if f.secure[i] {
			scheme = "https://"
		}
		urls[i] = scheme + lis.Addr().String()
	}
	return urls
}

// Stop stops serving: in-flight requests finish (until ctx ends), streams are then cut, connections closed.
// It is safe to call more than once: later calls wait for the first.
func (f *Frontend) Stop(ctx context.Context) error {
	f.stoppingOnce.Do(func() { f.stop(ctx) })
	return nil
}

func (f *Frontend) stop(ctx context.Context) {
	close(f.stopping)
	f.health.Shutdown()
	if self := f.self.Load(); self != nil {
		_ = self.Close() // its streams (a session's keep-alive, a lock's watch) would hold the graceful stop
	}
	stopped := make(chan struct{})
	go func() { f.grpcServer.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		f.grpcServer.Stop()
		<-stopped
	}
	for _, srv := range f.httpServers {
		shutdownCtx, cancel := context.WithTimeout(ctx, time.Second)
		if err := srv.Shutdown(shutdownCtx); err != nil {
			_ = srv.Close()
		}
		cancel()
	}
	for _, m := range f.muxes {
		m.Close()
	}
	for _, lis := range f.listeners {
		_ = lis.Close()
	}
	if f.gatewayConn != nil {
		_ = f.gatewayConn.Close()
	}
	if f.cancel != nil {
		f.cancel()
	}
	f.done.Wait()
	f.pool.close()
	closeBackends(f.watch.backends)
	closeBackends(f.lease.backends)
	f.logger.Info("frontend stopped", "name", f.cfg.Name)
}
