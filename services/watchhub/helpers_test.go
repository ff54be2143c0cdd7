package watchhub

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairn-kv/cairn/internal/commitlog/commitlogtest"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/storageclient"
	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
	"github.com/cairn-kv/cairn/services/storage"
)

// testEnv is a store and its bus on loopback: an embedded NATS server, storages sharing one in-process log
// (so they apply the same entries, as a cluster's members do) each publishing on the bus, and hubs.
type testEnv struct {
	t        testing.TB
	natsPort int
	nats     *eventbus.Embedded
	log      *commitlogtest.Log
	storages []*testStorage
	hubs     []*Hub
	tel      *obs.Telemetry
	// publishAlways makes storages started from then on publish every record, not only those a hub has
	// announced it wants (as Cairn's storages do).
	publishAlways bool
}

// testStorage is one member's storage with its own bus publisher.
type testStorage struct {
	cfg    storage.Config
	svc    *storage.Storage
	nc     *nats.Conn
	pub    *eventbus.Publisher
	client *storageclient.Client
	// drop, when set, makes the storage's sink drop the records it returns true for.
	drop atomic.Pointer[func(index uint64) bool]
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newTestEnv starts NATS and the given number of storages.
func newTestEnv(t testing.TB, storages int) *testEnv {
	t.Helper()
	env := &testEnv{t: t, natsPort: loopbacktest.Port(t), tel: obs.NoTelemetry()}
	env.startNATS()
	l, err := commitlogtest.Open(commitlogtest.Config{MemberID: 1})
	if err != nil {
		t.Fatal(err)
	}
	env.log = l
	for i := range storages {
		env.storages = append(env.storages, &testStorage{cfg: storage.Config{
			MemberID: uint64(i + 1), DataDir: t.TempDir(), ListenURL: fmt.Sprintf("http://127.0.0.1:%d", loopbacktest.Port(t)),
			BatchInterval: 10 * time.Millisecond, RequestTimeout: 5 * time.Second,
			LogCompactInterval: 50 * time.Millisecond,
		}})
		env.startStorage(i)
	}
	t.Cleanup(env.close)
	return env
}

func (env *testEnv) startNATS() {
	srv, err := eventbus.StartEmbedded(eventbus.EmbeddedConfig{Port: env.natsPort})
	if err != nil {
		env.t.Fatal(err)
	}
	env.nats = srv
}

func (env *testEnv) stopNATS() {
	env.nats.Shutdown()
	env.nats = nil
}

func (env *testEnv) natsURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", env.natsPort) }

// Applied is the storage's sink: it publishes on the bus unless told to drop the record.
func (s *testStorage) Applied(rec storage.AppliedRecord) {
	if drop := s.drop.Load(); drop != nil && (*drop)(rec.Index) {
		return
	}
	storage.BusSink{Publisher: s.pub, MemberID: s.cfg.MemberID}.Applied(rec)
}

func (env *testEnv) startStorage(i int) {
	t := env.t
	s := env.storages[i]
	nc, err := eventbus.Connect(env.natsURL(), fmt.Sprintf("storage-%d", i+1), quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.nc = nc
	s.pub = eventbus.NewPublisher(nc, eventbus.PublisherConfig{MemberID: s.cfg.MemberID, OnlyWhenWanted: !env.publishAlways}, nil, quietLogger())
	s.pub.Start()
	svc, err := storage.New(s.cfg, storage.Deps{Log: env.log, Sink: s, Telemetry: env.tel, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.svc = svc
	if s.client == nil {
		if s.client, err = storageclient.Dial(svc.URL()); err != nil {
			t.Fatal(err)
		}
	}
}

func (env *testEnv) stopStorage(i int) {
	s := env.storages[i]
	if s.svc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.svc.Stop(ctx)
	_ = s.pub.Stop(ctx)
	s.nc.Close()
	s.svc = nil
}

// startHub starts a hub on every storage with cfg's other settings.
func (env *testEnv) startHub(cfg Config) *Hub {
	t := env.t
	t.Helper()
	if cfg.ListenURL == "" {
		cfg.ListenURL = "http://127.0.0.1:0"
	}
	if len(cfg.StorageEndpoints) == 0 {
		for _, s := range env.storages {
			cfg.StorageEndpoints = append(cfg.StorageEndpoints, s.cfg.ListenURL)
		}
	}
	if cfg.NATSURL == "" {
		cfg.NATSURL = env.natsURL()
	}
	if cfg.StoragePollInterval == 0 {
		cfg.StoragePollInterval = 50 * time.Millisecond
	}
	if cfg.MaxWatchLag == 0 {
		// Tests not about the lag bound run without it, so that a loaded machine never cancels their watchers.
		cfg.MaxWatchLag = time.Hour
	}
	h, err := New(cfg, Deps{Telemetry: env.tel, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	env.hubs = append(env.hubs, h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.waitReady(ctx); err != nil {
		t.Fatalf("hub not ready: %v", err)
	}
	return h
}

func stopHub(h *Hub) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-h.stopping:
		return
	default:
	}
	_ = h.Stop(ctx)
}

func (env *testEnv) close() {
	for _, h := range env.hubs {
		stopHub(h)
	}
	for i, s := range env.storages {
		env.stopStorage(i)
		if s.client != nil {
			_ = s.client.Close()
		}
	}
	if env.nats != nil {
		env.nats.Shutdown()
	}
}

// client is the first storage's client.
func (env *testEnv) client() *storageclient.Client { return env.storages[0].client }

// put writes key=value through the first storage and returns the revision.
func (env *testEnv) put(key, value string) int64 {
	env.t.Helper()
	resp, err := env.client().Put(ctxT(env.t), &pb.PutRequest{Key: []byte(key), Value: []byte(value)})
	if err != nil {
		env.t.Fatalf("put %s: %v", key, err)
	}
	return resp.Header.Revision
}

// del deletes key through the first storage and returns the revision.
func (env *testEnv) del(key string) int64 {
	env.t.Helper()
	resp, err := env.client().DeleteRange(ctxT(env.t), &pb.DeleteRangeRequest{Key: []byte(key)})
	if err != nil {
		env.t.Fatalf("delete %s: %v", key, err)
	}
	return resp.Header.Revision
}

// writeAny puts key=value through whichever storage answers, retrying until deadline; it returns the revision.
func (env *testEnv) writeAny(ctx context.Context, key, value string) (int64, error) {
	for attempt := 0; ; attempt++ {
		s := env.storages[attempt%len(env.storages)]
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := s.client.Put(callCtx, &pb.PutRequest{Key: []byte(key), Value: []byte(value)})
		cancel()
		if err == nil {
			return resp.Header.Revision, nil
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("put %s: %w", key, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rawStream is a raw etcdserverpb Watch stream whose responses are collected by a goroutine.
type rawStream struct {
	t      testing.TB
	conn   *grpc.ClientConn
	stream pb.Watch_WatchClient
	cancel context.CancelFunc
	resps  chan *pb.WatchResponse
	errMu  sync.Mutex
	err    error
}

func dialHub(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func openRaw(t testing.TB, conn *grpc.ClientConn) *rawStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rs := &rawStream{t: t, conn: conn, stream: stream, cancel: cancel, resps: make(chan *pb.WatchResponse, 1<<16)}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				rs.errMu.Lock()
				rs.err = err
				rs.errMu.Unlock()
				close(rs.resps)
				return
			}
			rs.resps <- resp
		}
	}()
	t.Cleanup(cancel)
	return rs
}

func (rs *rawStream) send(req *pb.WatchRequest) {
	rs.t.Helper()
	if err := rs.stream.Send(req); err != nil {
		rs.t.Fatalf("send %v: %v", req, err)
	}
}

func (rs *rawStream) create(c *pb.WatchCreateRequest) {
	rs.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: c}})
}

func (rs *rawStream) requestProgress() {
	rs.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
}

// next returns the next response, failing the test after timeout.
func (rs *rawStream) next(timeout time.Duration) *pb.WatchResponse {
	rs.t.Helper()
	select {
	case resp, ok := <-rs.resps:
		if !ok {
			rs.t.Fatalf("stream ended: %v", rs.err)
		}
		return resp
	case <-time.After(timeout):
		rs.t.Fatalf("no response within %v", timeout)
	}
	return nil
}

// none checks that nothing arrives for d.
func (rs *rawStream) none(d time.Duration) {
	rs.t.Helper()
	select {
	case resp, ok := <-rs.resps:
		if ok {
			rs.t.Fatalf("unexpected response %v", resp)
		}
	case <-time.After(d):
	}
}
