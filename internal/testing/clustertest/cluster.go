package clustertest

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
	"github.com/cairn-kv/cairn/services/frontend"
	"github.com/cairn-kv/cairn/services/leasekeeper"
	"github.com/cairn-kv/cairn/services/storage"
	"github.com/cairn-kv/cairn/services/watchhub"
)

// Options shape a cluster; the zero value is 3 members, one frontend per member, storages on consensusclient.
type Options struct {
	// Members is the number of members (consensus + storage). Default 3.
	Members int
	// Frontends is the number of frontends; frontend i is named after member i (its home member) while there
	// are members left, "fe<i>" after that. Default: one per member. -1: none.
	Frontends int
	// InProcessLog makes each storage use its member's *consensus.Node directly as its commitlog.Log, as
	// `cairn dev` wires them; by default storages reach consensus through consensusclient over loopback gRPC,
	// as separate processes do.
	InProcessLog bool
	// HeartbeatInterval and ElectionTimeout default to 25 ms and 250 ms.
	HeartbeatInterval, ElectionTimeout time.Duration
	// SnapshotCount and SnapshotCatchUpEntries are consensus's (defaults: etcd's 10000 and 5000).
	SnapshotCount, SnapshotCatchUpEntries uint64
	// ConfigureConsensus, ConfigureStorage and ConfigureFrontend adjust each service's configuration.
	ConfigureConsensus func(*consensus.Config)
	ConfigureStorage   func(*storage.Config)
	ConfigureFrontend  func(*frontend.Config)
	// StorageKeyring, if set, gives a member's storage its keyring (storage.Deps.Keyring) at each start, so a
	// test can restart a storage on another encryption configuration.
	StorageKeyring func(member string) *seal.Keyring
	// Leasekeepers is the number of leasekeepers (the first to claim is active, the others stand by); with
	// any, an embedded NATS carries every storage's applied records and the frontends forward Lease to them.
	Leasekeepers         int
	ConfigureLeasekeeper func(*leasekeeper.Config)
	// Watchhubs is the number of watchhubs; with any, the frontends relay Watch streams to them (and the
	// embedded NATS carries the storages' records). Default 0: Watch is unavailable.
	Watchhubs         int
	ConfigureWatchhub func(*watchhub.Config)
	// Telemetry traces every service (and storage's consensus client); default
	// obs.NoTelemetry(), which records nothing.
	Telemetry *obs.Telemetry
	// ClientTLS is what Client dials the frontends with, for frontends that ConfigureFrontend made serve
	// https; nil is plain gRPC.
	ClientTLS *tls.Config
}

func (o Options) withDefaults() Options {
	if o.Members == 0 {
		o.Members = 3
	}
	switch o.Frontends {
	case 0:
		o.Frontends = o.Members
	case -1:
		o.Frontends = 0
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = 25 * time.Millisecond
	}
	if o.ElectionTimeout == 0 {
		o.ElectionTimeout = 250 * time.Millisecond
	}
	if o.Telemetry == nil {
		o.Telemetry = obs.NoTelemetry()
	}
	return o
}

// RelaySecret is the relay secret of every cluster's frontends, watchhubs and leasekeepers (package
// relayauth): a test calling a hub or keeper directly sends it to pass as a frontend.
const RelaySecret = "clustertest-relay-secret"

// Cluster is a running Cairn cluster inside the test process.
type Cluster struct {
	t         testing.TB
	opts      Options
	dir       string
	Consensus *consensustest.Cluster
	members   []*Member
	frontends []*Frontend
	keepers   []*Leasekeeper
	watchhubs []*Watchhub
	bus       *bus // nil without leasekeepers and watchhubs
	stopOnce  sync.Once
}

// Start starts a cluster on loopback and waits until a write through every frontend succeeds; everything is
// stopped when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	opts = opts.withDefaults()
	c := &Cluster{t: t, opts: opts, dir: t.TempDir()}
	for i := range opts.Members {
		name := fmt.Sprintf("m%d", i+1) // consensustest's member names
		lis := listenLoopback(t)
		c.members = append(c.members, &Member{Name: name, cluster: c, StorageURL: "http://" + lis.Addr().String(),
			dataDir: filepath.Join(c.dir, name+".storage"), reserved: lis})
	}
	if opts.Leasekeepers > 0 || opts.Watchhubs > 0 {
		c.startBus(t)
	}
	for i := range opts.Leasekeepers {
		lis := listenLoopback(t)
		c.keepers = append(c.keepers, &Leasekeeper{Name: fmt.Sprintf("lk%d", i+1), URL: "http://" + lis.Addr().String(),
			cluster: c, reserved: lis})
	}
	for i := range opts.Watchhubs {
		lis := listenLoopback(t)
		c.watchhubs = append(c.watchhubs, &Watchhub{Name: fmt.Sprintf("wh%d", i+1), URL: "http://" + lis.Addr().String(),
			cluster: c, reserved: lis})
	}
	for i := range opts.Frontends {
		name := fmt.Sprintf("fe%d", i+1)
		if i < len(c.members) {
			name = c.members[i].Name
		}
		lis := listenLoopback(t)
		fe := &Frontend{Name: name, URL: "http://" + lis.Addr().String(), cluster: c, reserved: lis}
		c.frontends = append(c.frontends, fe)
		if i < len(c.members) {
			c.members[i].ClientURL = fe.URL
			if opts.ClientTLS != nil { // the frontends serve https: the members advertise it, as cairn up's do
				c.members[i].ClientURL = strings.Replace(fe.URL, "http://", "https://", 1)
			}
		}
	}
	c.Consensus = consensustest.Start(t, consensustest.Options{
		Members: opts.Members, ConsensusAPI: true,
		HeartbeatInterval: opts.HeartbeatInterval, ElectionTimeout: opts.ElectionTimeout,
		SnapshotCount: opts.SnapshotCount, SnapshotCatchUpEntries: opts.SnapshotCatchUpEntries,
		Configure: c.configureConsensus, Telemetry: opts.Telemetry,
	})
	t.Cleanup(c.Stop)
	for i, cm := range c.Consensus.Members() {
		c.members[i].consensus = cm
	}
	c.startAll(t)
	c.WaitPublished(30 * time.Second)
	c.WaitWritable(30 * time.Second)
	return c
}

// listenLoopback binds 127.0.0.1:0 for a service's first start, so its URL is its own before anything starts;
// a listener no start took is closed when the test ends.
func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	return lis
}

// WaitPublished waits until consensus membership lists every member with its storage URL (which consensus
// publishes shortly after starting), and every frontend has discovered its home member's storage.
func (c *Cluster) WaitPublished(timeout time.Duration) {
	c.t.Helper()
	waittest.Until(c.t, timeout, 5*time.Millisecond, "every member's attributes published", func() bool {
		st, err := c.members[0].Node().Status(context.Background())
		if err != nil {
			return false
		}
		for _, m := range st.Members {
			if m.StorageURL == "" {
				return false
			}
		}
		return len(st.Members) == len(c.members)
	})
	for i, fe := range c.frontends {
		if i >= len(c.members) || fe.Frontend() == nil {
			continue
		}
		cli := c.Client(c.t, fe.URL)
		want := c.members[i].ID()
		waittest.Until(c.t, timeout, 5*time.Millisecond, "frontend "+fe.Name+" reads from its home member", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			resp, err := cli.Get(ctx, "testcluster/ready", clientv3.WithSerializable())
			return err == nil && resp.Header.MemberId == want
		})
	}
}

func (c *Cluster) configureConsensus(cfg *consensus.Config) {
	for _, m := range c.members {
		if m.Name == cfg.Name {
			cfg.AdvertiseStorageURL = m.StorageURL
			if m.ClientURL != "" {
				cfg.AdvertiseClientURLs = []string{m.ClientURL}
			}
		}
	}
	if c.opts.ConfigureConsensus != nil {
		c.opts.ConfigureConsensus(cfg)
	}
}

func (c *Cluster) startAll(t testing.TB) {
	var wg sync.WaitGroup
	errs := make([]error, len(c.members)+len(c.frontends))
	for i, m := range c.members {
		wg.Go(func() { errs[i] = m.StartStorage() })
	}
	wg.Wait()
	for _, k := range c.keepers {
		if err := k.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range c.watchhubs {
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, fe := range c.frontends {
		wg.Go(func() { errs[len(c.members)+i] = fe.Start() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Members returns every member.
func (c *Cluster) Members() []*Member { return c.members }

// Frontends returns every frontend.
func (c *Cluster) Frontends() []*Frontend { return c.frontends }

// Endpoints returns every frontend's client URL.
func (c *Cluster) Endpoints() []string {
	var urls []string
	for _, fe := range c.frontends {
		urls = append(urls, fe.URL)
	}
	return urls
}

// ConsensusEndpoints returns every member's consensus API URL.
func (c *Cluster) ConsensusEndpoints() []string {
	var urls []string
	for _, m := range c.members {
		urls = append(urls, m.ConsensusURL())
	}
	return urls
}

// Client returns an etcd client of the given endpoints (every frontend when none), closed when the test ends.
func (c *Cluster) Client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	if c.opts.ClientTLS != nil { // client/v3 dials an http:// endpoint without TLS whatever its config says
		endpoints = slices.Clone(endpoints)
		for i, e := range endpoints {
			endpoints[i] = strings.Replace(e, "http://", "https://", 1)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: c.opts.ClientTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Leader waits for a leader all running consensus members agree on and returns its member.
func (c *Cluster) Leader(timeout time.Duration) *Member {
	c.t.Helper()
	leader := c.Consensus.WaitLeader(timeout)
	for _, m := range c.members {
		if m.consensus == leader {
			return m
		}
	}
	c.t.Fatalf("leader %s is not a member", leader.Name)
	return nil
}

// WaitWritable waits until a put through every frontend succeeds.
func (c *Cluster) WaitWritable(timeout time.Duration) {
	c.t.Helper()
	for _, fe := range c.frontends {
		if fe.Frontend() == nil {
			continue
		}
		cli := c.Client(c.t, fe.URL)
		waittest.Until(c.t, timeout, 5*time.Millisecond, "a put through frontend "+fe.Name, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := cli.Put(ctx, "testcluster/ready", fe.Name)
			return err == nil
		})
	}
}

// Stop stops every frontend, leasekeeper, watchhub, storage and consensus member (also run when the test
// ends); the bus stops after them.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		var wg sync.WaitGroup
		for _, fe := range c.frontends {
			wg.Go(fe.Stop)
		}
		wg.Wait()
		for _, k := range c.keepers {
			wg.Go(k.Stop)
		}
		for _, w := range c.watchhubs {
			wg.Go(w.Stop)
		}
		wg.Wait()
		for _, m := range c.members {
			wg.Go(m.StopStorage)
		}
		wg.Wait()
		c.Consensus.StopAll()
	})
}

// logger discards logs unless CAIRN_TEST_LOG is set (to a level name).
func logger(service, member string) *slog.Logger {
	level, ok := os.LookupEnv("CAIRN_TEST_LOG")
	if !ok {
		return slog.New(slog.DiscardHandler)
	}
	l, err := obs.ParseLevel(level)
	if err != nil {
		l = slog.LevelInfo
	}
	return obs.NewLogger(os.Stderr, service, member, l)
}
