package leasekeeper

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/commitlog/commitlogtest"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/eventbus/eventbustest"
	"github.com/cairn-kv/cairn/internal/storageclient"
	"github.com/cairn-kv/cairn/internal/testing/memnet"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
	"github.com/cairn-kv/cairn/services/storage"
)

// testEnv is a real store for keepers: a NATS, storages applying one in-process log (memlog) and publishing on
// the bus, and a storage client; on loopback, or on an in-memory network inside a synctest bubble.
type testEnv struct {
	t        testing.TB
	natsURL  string
	network  *memnet.Network // nil: loopback
	storages []*storage.Storage
	store    *storageclient.Client
	prefix   string
	// peerAddrs, set by withPeers, are the keepers' fixed addresses by name: their configs list each other as
	// Config.PeerURLs (the claim held without log writes). Empty: every keeper binds a new port and renews its
	// claim through the log.
	peerAddrs map[string]string
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("CAIRN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// newTestEnv starts NATS and the given number of storages (members 1..n) on one in-process log.
func newTestEnv(t testing.TB, storages int) *testEnv {
	t.Helper()
	env := startBus(t)
	env.addMemlogStorages(storages)
	return env
}

// newBubbleEnv is newTestEnv on an in-memory network, for tests where time is the subject: call it inside
// synctest.Test, and every storage, keeper and client of the env runs on the bubble's fake clock.
func newBubbleEnv(t testing.TB, storages int) *testEnv {
	t.Helper()
	env := startBubbleBus(t)
	env.addMemlogStorages(storages)
	return env
}

// newRaftEnv starts NATS and a real 3-member consensus cluster (WAL fsyncs, gRPC transport, etcd's default
// heartbeat and election timeout) with a storage on each member.
func newRaftEnv(t testing.TB) *testEnv {
	t.Helper()
	env := startBus(t)
	env.addRaftStorages()
	return env
}

// newBubbleRaftEnv is newRaftEnv on an in-memory network (raft peer links included): call it inside
// synctest.Test.
func newBubbleRaftEnv(t testing.TB) *testEnv {
	t.Helper()
	env := startBubbleBus(t)
	env.addRaftStorages()
	return env
}

func startBus(t testing.TB) *testEnv {
	nats, err := eventbus.StartEmbedded(eventbus.EmbeddedConfig{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nats.Shutdown)
	return &testEnv{t: t, natsURL: nats.ClientURL(), prefix: "test"}
}

// startBubbleBus starts NATS in-process, reached at bubbleNATSAddr on a new in-memory network.
func startBubbleBus(t testing.TB) *testEnv {
	bus := eventbustest.Start(t)
	env := &testEnv{t: t, natsURL: "nats://" + bubbleNATSAddr, network: memnet.New(), prefix: "test"}
	env.network.Route(bubbleNATSAddr, bus.InProcessConn)
	return env
}

// bubbleNATSAddr is where a bubble env's NATS is reached on its in-memory network.
const bubbleNATSAddr = "127.0.0.1:4222"

// addMemlogStorages starts storages of members 1..n on one in-process log, and the env's storage client.
func (e *testEnv) addMemlogStorages(n int) {
	log, err := commitlogtest.Open(commitlogtest.Config{MemberID: 1})
	if err != nil {
		e.t.Fatal(err)
	}
	for member := uint64(1); member <= uint64(n); member++ {
		e.addStorage(member, log)
	}
	e.dialStore()
}

// addRaftStorages starts a 3-member consensus cluster on the env's network, a storage on each member, and
// the env's storage client.
func (e *testEnv) addRaftStorages() {
	cluster := consensustest.Start(e.t, consensustest.Options{HeartbeatInterval: 100 * time.Millisecond,
		ElectionTimeout: time.Second, Network: e.network})
	for _, m := range cluster.Members() {
		e.addStorage(m.Node().ID(), m.Node())
	}
	e.dialStore()
}

// connectBus connects a client named name to the env's NATS; it closes when the test ends.
func (e *testEnv) connectBus(name string) *nats.Conn {
	e.t.Helper()
	var opts []nats.Option
	if e.network != nil {
		opts = append(opts, eventbus.DialWith(e.network.Dial))
	}
	nc, err := eventbus.Connect(e.natsURL, name, testLogger(e.t), nil, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// listener is where a storage or keeper of the env serves: nil (it binds loopback itself) or an in-memory one.
func (e *testEnv) listener() net.Listener {
	if e.network == nil {
		return nil
	}
	return e.network.Listen()
}

// dialOptions reach the env's servers.
func (e *testEnv) dialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if e.network != nil {
		opts = append(opts, grpc.WithContextDialer(e.network.Dial))
	}
	return opts
}

// addStorage starts a storage of member on log, publishing on the bus.
func (e *testEnv) addStorage(member uint64, log commitlog.Log) {
	t := e.t
	nc := e.connectBus(fmt.Sprintf("storage-%x", member))
	pub := eventbus.NewPublisher(nc, eventbus.PublisherConfig{SubjectPrefix: e.prefix, MemberID: member}, nil, testLogger(t))
	pub.Start()
	s, err := storage.New(storage.Config{MemberID: member, DataDir: t.TempDir(), ListenURL: "http://127.0.0.1:0",
		BatchInterval: 10 * time.Millisecond, RequestTimeout: 5 * time.Second, QuotaBackendBytes: -1},
		storage.Deps{Log: log, Sink: storage.BusSink{Publisher: pub, MemberID: member}, Logger: testLogger(t),
			Listener: e.listener()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
		_ = pub.Stop(ctx)
	})
	e.storages = append(e.storages, s)
}

func (e *testEnv) dialStore() {
	var err error
	if e.store, err = storageclient.Dial(e.storages[0].URL(), e.dialOptions()...); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.store.Close() })
}

// withPeers gives the keepers named names fixed addresses and makes every keeper of the env list them as its
// peers, so the claim is held without log writes. It returns e.
func (e *testEnv) withPeers(names ...string) *testEnv {
	e.peerAddrs = map[string]string{}
	for _, name := range names {
		var lis net.Listener
		if e.network != nil {
			lis = e.network.Listen()
		} else {
			var err error
			if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				e.t.Fatal(err)
			}
		}
		e.peerAddrs[name] = lis.Addr().String()
		_ = lis.Close() // bound again by the keeper's start
	}
	return e
}

// keeperConfig is a keeper on this env with fast test timings.
func (e *testEnv) keeperConfig(name string) Config {
	var endpoints []string
	for _, s := range e.storages {
		endpoints = append(endpoints, s.URL())
	}
	cfg := Config{Name: name, ListenURL: "http://127.0.0.1:0", StorageEndpoints: endpoints, NATSURL: e.natsURL,
		SubjectPrefix: e.prefix, CheckpointInterval: 500 * time.Millisecond, ReconcileInterval: time.Second,
		RequestTimeout: 5 * time.Second}
	if addr, ok := e.peerAddrs[name]; ok {
		cfg.ListenURL = "http://" + addr
	}
	for _, addr := range e.peerAddrs {
		cfg.PeerURLs = append(cfg.PeerURLs, "http://"+addr)
	}
	return cfg
}

// startKeeper starts a keeper; it is killed (not stopped) when the test ends, unless the test stopped it.
func (e *testEnv) startKeeper(cfg Config) *Keeper {
	e.t.Helper()
	deps := Deps{Logger: testLogger(e.t)}
	if e.network != nil {
		deps.Dialer = e.network.Dial
		if u, err := url.Parse(cfg.ListenURL); err == nil && u.Port() != "0" {
			if deps.Listener, err = e.network.ListenAt(u.Host); err != nil { // a peer's fixed address
				e.t.Fatal(err)
			}
		} else {
			deps.Listener = e.network.Listen()
		}
	}
	k, err := New(cfg, deps)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := k.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(k.Crash)
	return k
}

// waitActive waits until k is the active keeper.
func waitActive(t testing.TB, k *Keeper, timeout time.Duration) {
	t.Helper()
	waittest.Until(t, timeout, 10*time.Millisecond, k.ID()+" active", func() bool {
		_, ok := k.activeEpoch(time.Now())
		return ok
	})
}

// leaseClient is a raw etcd Lease client of a keeper of env.
func (e *testEnv) leaseClient(t testing.TB, k *Keeper) pb.LeaseClient {
	t.Helper()
	u, err := url.Parse(k.URL())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(u.Host, e.dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewLeaseClient(conn)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// keyExists reads a key from storage (linearizably).
func (e *testEnv) keyExists(ctx context.Context, key string) bool {
	e.t.Helper()
	resp, err := e.store.Range(ctx, &pb.RangeRequest{Key: []byte(key)})
	if err != nil {
		e.t.Fatalf("range %s: %v", key, err)
	}
	return len(resp.Kvs) == 1
}

// put writes key attached to lease.
func (e *testEnv) put(ctx context.Context, key string, lease int64) {
	e.t.Helper()
	if _, err := e.store.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte("v"), Lease: lease}); err != nil {
		e.t.Fatalf("put %s with lease %x: %v", key, lease, err)
	}
}
