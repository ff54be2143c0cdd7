package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/link"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/rpctune"
	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/wiremsg"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// dbFileName is the bbolt file inside DataDir.
const dbFileName = "storage.db"

// Storage is one member's storage service. Build it with New, run it with Start, end it with Stop. Its methods
// (Submit, Range, ...) are the Storage API, callable in-process as well as over gRPC.
type Storage struct {
	cfg     Config
	deps    Deps
	log     commitlog.Log
	sink    AppliedSink
	tel     *obs.Telemetry
	tracer  trace.Tracer
	stages  obs.StageTracer
	commits commitLinks // sampled applies waiting for their bbolt commit
	logger  *slog.Logger
	metrics *metrics
	ids     *requestIDs
	waiters *waiters
	tokens  *simpleTokens // simple auth tokens of the applied Authenticate entries
	reads   *readBarrier
	alarms  *corruptAlarms // CORRUPT alarms waiting to be proposed
	keyring *seal.Keyring  // nil: values are stored plain

	// answerBuffers hold the pipeline's encoded range answers until gRPC has sent them.
	answerBuffers wiremsg.Pool
	served        servedCalls
	logStatus     logStatusCache // the raft fields Status last read from the log

	// applyMu is held while the apply loop delivers a batch, so a defragmentation can swap the store between
	// batches; it is taken before storeMu.
	applyMu sync.Mutex

	// storeMu guards the store pointer: readers hold it shared while they use the store; a snapshot install or a
	// failure recovery swaps the store holding it exclusively.
	storeMu sync.RWMutex
	store   *mvcc.Store

	appliedMu sync.Mutex
	appliedCh chan struct{} // closed and replaced whenever the applied index advances

	unhealthy  atomic.Pointer[string]
	failedCh   chan struct{} // signalled by the store's OnFailure
	durable    atomic.Uint64
	durableCh  chan struct{} // signalled by setDurable: wakes the compaction reporter
	reported   atomic.Uint64
	recovering bool // apply loop only: a reopened store must commit once before storage is healthy again

	grpcServer *grpc.Server
	stopping   chan struct{} // closed when Stop begins: pipelines finish their calls and end
	listener   net.Listener
	port       *framed.Port // serves listener: gRPC and the frontend's pipelines
	admin      *obs.AdminServer
	cancel     context.CancelFunc
	done       sync.WaitGroup
	stopOnce   sync.Once
	stopErr    error
}

// New opens the storage's database in cfg.DataDir and prepares the service; nothing runs until Start.
func New(cfg Config, deps Deps) (*Storage, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("storage config: %w", err)
	}
	if deps.Log == nil {
		return nil, ErrNoLog
	}
	deps = deps.withDefaults()
	log, sink, tel, logger := deps.Log, deps.Sink, deps.Telemetry, deps.Logger
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	s := &Storage{
		cfg: cfg, deps: deps, log: log, sink: sink, tel: tel, tracer: tel.Tracer("github.com/cairn-kv/cairn/services/storage"),
		stages: tel.Stages("storage", fmt.Sprintf("%x", cfg.MemberID)),
		logger: logger.With("member-id", fmt.Sprintf("%x", cfg.MemberID)), ids: newRequestIDs(cfg.MemberID, time.Now()),
		stopping: make(chan struct{}), waiters: newWaiters(), tokens: newSimpleTokens(), appliedCh: make(chan struct{}),
		failedCh: make(chan struct{}, 1), durableCh: make(chan struct{}, 1), keyring: deps.Keyring, alarms: newCorruptAlarms(),
	}
	s.reads = newReadBarrier(log.ReadIndex, cfg.RequestTimeout, s.stages)
	s.metrics = newMetrics(s)
	if err := checkKeyring(s.dbPath(), s.keyring, s.logger); err != nil {
		return nil, err
	}
	st, err := s.openStore()
	if err != nil {
		return nil, err
	}
	s.store = st
	s.setDurable(st.Position().DurableIndex)
	return s, nil
}

func (s *Storage) dbPath() string { return filepath.Join(s.cfg.DataDir, dbFileName) }

func (s *Storage) openStore() (*mvcc.Store, error) {
	var opener mvcc.ValueOpener
	if s.keyring != nil {
		opener = valueOpener{s}
	}
	return mvcc.Open(mvcc.Config{
		Opener: opener,
		Path:   s.dbPath(), BatchInterval: s.cfg.BatchInterval, BatchLimit: s.cfg.BatchLimit,
		CompactionBatchLimit: s.cfg.CompactionBatchLimit, CompactionSleepInterval: s.cfg.CompactionSleepInterval,
		MinLeaseTTL: s.cfg.MinLeaseTTL, Logger: s.logger,
		OnCommit: func(durable uint64, entries int, start, end time.Time) {
			s.setDurable(durable)
			s.metrics.backendCommit.Observe(end.Sub(start).Seconds())
			s.committed(durable, entries, start, end)
		},
		OnFailure: func(error) {
			select {
			case s.failedCh <- struct{}{}:
			default:
			}
		},
	})
}

// Start serves the gRPC API (and the admin endpoint, if configured) and starts applying the log. With
// InitialCorruptCheck it first compares this member's data with its peers' and fails with ErrCorrupt, serving
// nothing, when they differ.
func (s *Storage) Start(ctx context.Context) error {
	if s.cfg.InitialCorruptCheck {
		if err := s.initialCorruptCheck(ctx); err != nil {
			s.logger.Error("initial corruption check failed; not starting", "err", err)
			return err
		}
	}
	lis, err := config.Listen(s.deps.Listener, s.cfg.ListenURL)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	s.listener = lis
	opts := append(append(s.tel.ServerOptions(), rpctune.ServerOptions()...), grpc.MaxRecvMsgSize(s.cfg.MaxRequestBytes+grpcOverheadBytes),
		grpc.MaxSendMsgSize(maxSendBytes), grpc.ForceServerCodecV2(wiremsg.NewCodec()))
	s.grpcServer = grpc.NewServer(opts...)
	storagepb.RegisterStorageServer(s.grpcServer, &server{s: s})
	// One port: the frontend's pipelines (told by their preamble) and gRPC for everything else.
	s.port = framed.Serve(s.deps.Internal.Listener(lis, "storage"), s.grpcServer, map[string]func(*framed.Conn){storagepb.PipelinePreamble: s.servePipeline}, s.logger)
	if s.cfg.AdminAddr != "" {
		admin, err := obs.ListenAdmin(s.cfg.AdminAddr, obs.AdminMux(s.metrics.registry, s.Health), s.logger)
		if err != nil {
			s.grpcServer.Stop()
			_ = s.port.Close()
			return err
		}
		s.admin = admin
		admin.Start()
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.done.Add(5)
	go func() { defer s.done.Done(); s.runApplyLoop(runCtx) }()
	go func() { defer s.done.Done(); s.runCompactReporter(runCtx) }()
	go func() { defer s.done.Done(); s.watchForForeignDatabase(runCtx) }()
	go func() { defer s.done.Done(); s.runAutoCompaction(runCtx) }()
	go func() { defer s.done.Done(); s.runCorruptAlarms(runCtx) }()
	if s.cfg.CompactHashCheckEnabled {
		s.done.Add(1)
		go func() { defer s.done.Done(); s.runCompactHashCheck(runCtx) }()
	}
	s.logger.Info("storage started", "url", s.URL(), "data_dir", s.cfg.DataDir,
		"applied_index", s.currentStore().Position().AppliedIndex)
	return nil
}

// grpcOverheadBytes is etcd's allowance over MaxRequestBytes for gRPC framing; maxSendBytes lets large ranges out.
const (
	grpcOverheadBytes = 512 * 1024
	maxSendBytes      = 1<<31 - 1
)

// URL is the http:// URL the gRPC API is served on (with the real port once started).
func (s *Storage) URL() string {
	if s.listener == nil {
		return s.cfg.ListenURL
	}
	return "http://" + s.listener.Addr().String()
}

// AdminAddr is the bound admin address, or "" when none is served.
func (s *Storage) AdminAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.Addr()
}

// Stop stops serving and applying, then commits and closes the database. It is safe to call more than once
// (later calls wait for the first and return its result).
func (s *Storage) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Storage) stop(ctx context.Context) error {
	close(s.stopping)
	if s.port != nil {
		_ = s.port.Close() // new connections are refused at once
		s.port.Wait()      // each pipeline answers what it started, then ends
	}
	if s.grpcServer != nil {
		stopped := make(chan struct{})
		go func() { s.grpcServer.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			s.grpcServer.Stop()
		}
	}
	if s.admin != nil {
		_ = s.admin.Stop(ctx)
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.done.Wait()
	s.waiters.stop()
	s.storeMu.Lock()
	defer s.storeMu.Unlock()
	err := s.store.Close()
	s.logger.Info("storage stopped", "err", err)
	return err
}

// currentStore returns the store; the caller must not keep it across a swap (readers use withStore).
func (s *Storage) currentStore() *mvcc.Store {
	s.storeMu.RLock()
	defer s.storeMu.RUnlock()
	return s.store
}

// withStore runs f with the store held against swaps, after checking storage is healthy.
func (s *Storage) withStore(f func(st *mvcc.Store) error) error {
	s.storeMu.RLock()
	defer s.storeMu.RUnlock()
	if reason := s.unhealthyReason(); reason != "" {
		return unavailable(reason)
	}
	err := f(s.store)
	if errors.Is(err, mvcc.ErrClosed) || (err != nil && s.store.Err() != nil) {
		return unavailable(err.Error())
	}
	return err
}

// unavailable is storage's refusal of a call it has not started (unhealthy, stopping): marked link.NotSent, so
// the frontend may send the call to another storage.
func unavailable(reason string) error {
	return link.NotSent(status.Error(codes.Unavailable, "cairn storage unavailable: "+reason))
}

func (s *Storage) unhealthyReason() string {
	if r := s.unhealthy.Load(); r != nil {
		return *r
	}
	return ""
}

func (s *Storage) setUnhealthy(reason string) {
	if reason == "" {
		s.unhealthy.Store(nil)
		return
	}
	s.unhealthy.Store(&reason)
}

// Health reports why storage cannot serve, if it cannot: a failed database, or an active alarm (as etcd's
// /health does).
func (s *Storage) Health(context.Context) error {
	if reason := s.unhealthyReason(); reason != "" {
		return errors.New(reason)
	}
	for _, a := range s.currentStore().Alarms(pb.AlarmType_NONE) {
		return fmt.Errorf("alarm activated: %v on member %x", a.Alarm, a.MemberID)
	}
	return nil
}

// notifyApplied wakes everyone waiting for the applied index to advance.
func (s *Storage) notifyApplied() {
	s.appliedMu.Lock()
	close(s.appliedCh)
	s.appliedCh = make(chan struct{})
	s.appliedMu.Unlock()
}

// waitApplied waits until the store has applied index.
func (s *Storage) waitApplied(ctx context.Context, index uint64) error {
	for {
		s.appliedMu.Lock()
		ch := s.appliedCh
		s.appliedMu.Unlock()
		if s.currentStore().Position().AppliedIndex >= index {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctxError(ctx)
		case <-ch:
		}
	}
}

// ctxError maps a finished context to etcd's error.
func ctxError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return rpctypes.ErrGRPCCanceled
	}
	return rpctypes.ErrGRPCTimeout
}
