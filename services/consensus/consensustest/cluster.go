package consensustest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/testing/memnet"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/consensus/transport"
)

// Options shape a test cluster; the zero value is a 3-member cluster with fast timeouts.
type Options struct {
	Members int
	// HeartbeatInterval and ElectionTimeout default to 10 ms and 100 ms.
	HeartbeatInterval, ElectionTimeout time.Duration
	// SnapshotCount and SnapshotCatchUpEntries default to etcd's 10000 and 5000.
	SnapshotCount, SnapshotCatchUpEntries uint64
	// WALSegmentSize defaults to 4 MiB, to keep test directories small.
	WALSegmentSize int64
	// ConsensusAPI makes every member serve the Consensus gRPC API on loopback (Member.APIAddr).
	ConsensusAPI bool
	// StateMachines attaches a StateMachine to every member, which applies its log and calls Compact.
	StateMachines bool
	// Configure, if set, adjusts each member's configuration before it starts.
	Configure func(*consensus.Config)
	// Telemetry, if set, is every member's telemetry (default: none).
	Telemetry *obs.Telemetry
	// Network, if set, carries every member's peer and API connections in memory instead of on loopback, so
	// the cluster can run inside a synctest bubble (start it there: within synctest.Test).
	Network *memnet.Network
}

func (o Options) withDefaults() Options {
	if o.Members == 0 {
		o.Members = 3
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = 10 * time.Millisecond
	}
	if o.ElectionTimeout == 0 {
		o.ElectionTimeout = 100 * time.Millisecond
	}
	if o.SnapshotCount == 0 {
		o.SnapshotCount = 10000
	}
	if o.SnapshotCatchUpEntries == 0 {
		o.SnapshotCatchUpEntries = 5000
	}
	if o.WALSegmentSize == 0 {
		o.WALSegmentSize = 4 << 20
	}
	return o
}

// Cluster is a running test cluster.
type Cluster struct {
	t       testing.TB
	opts    Options
	dir     string
	mu      sync.Mutex
	members []*Member
	// Machines is where each member's StateMachine is found by member ID (for snapshot transfer).
	Machines *Machines
}

// Member is one member of a test cluster.
type Member struct {
	Name    string
	PeerURL string
	APIAddr string
	DataDir string
	Faults  *transport.Faults
	cluster *Cluster
	// reserved are the peer and API listeners bound when the member was created, served by its first start;
	// a restart binds the same addresses again.
	reserved []net.Listener
	initial  string
	state    string
	mu       sync.Mutex
	node     *consensus.Node
	registry *prometheus.Registry // the current node's metrics
	machine  *StateMachine
	cancelSM context.CancelFunc
	smDone   chan struct{}
}

// Start starts a new cluster and waits until it has a leader; the cluster stops when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	opts = opts.withDefaults()
	c := &Cluster{t: t, opts: opts, dir: t.TempDir(), Machines: NewMachines()}
	var parts []string
	for i := range opts.Members {
		m := c.newMember(fmt.Sprintf("m%d", i+1))
		parts = append(parts, m.Name+"="+m.PeerURL)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.initial, m.state = strings.Join(parts, ","), consensus.ClusterStateNew
	}
	t.Cleanup(c.StopAll)
	var wg sync.WaitGroup
	errs := make([]error, len(c.members))
	for i, m := range c.members {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = m.Start() }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.WaitLeader(10 * time.Second)
	return c
}

// newMember binds a loopback (or Options.Network) peer listener, and API listener, for a member, so its
// addresses are its own before anything starts.
func (c *Cluster) newMember(name string) *Member {
	m := &Member{Name: name, cluster: c, DataDir: filepath.Join(c.dir, name), Faults: transport.NewFaults()}
	m.PeerURL = "http://" + m.reserve(c.t)
	if c.opts.ConsensusAPI {
		m.APIAddr = m.reserve(c.t)
	}
	return m
}

// reserve binds 127.0.0.1:0 (or a port of Options.Network) for the member's first start and returns the
// address.
func (m *Member) reserve(t testing.TB) string {
	t.Helper()
	if network := m.cluster.opts.Network; network != nil {
		lis := network.Listen()
		m.reserved = append(m.reserved, lis)
		return lis.Addr().String()
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.reserved = append(m.reserved, lis)
	return lis.Addr().String()
}

// deps are the member's dependencies for one start: the reserved listeners on the first, none after
// (consensus binds the same URLs again; on Options.Network, the same addresses are bound here).
func (c *Cluster) deps(m *Member) (consensus.Deps, error) {
	deps := consensus.Deps{Faults: m.Faults, Logger: testLogger(m.Name), Telemetry: c.opts.Telemetry}
	m.mu.Lock()
	reserved := m.reserved
	m.reserved = nil
	m.mu.Unlock()
	if c.opts.Network != nil {
		deps.Dialer = c.opts.Network.Dial
		if len(reserved) == 0 {
			addrs := []string{strings.TrimPrefix(m.PeerURL, "http://")}
			if m.APIAddr != "" {
				addrs = append(addrs, m.APIAddr)
			}
			for _, addr := range addrs {
				lis, err := c.opts.Network.ListenAt(addr)
				if err != nil {
					closeListeners(consensus.Deps{PeerListeners: reserved})
					return deps, fmt.Errorf("member %s: %w", m.Name, err)
				}
				reserved = append(reserved, lis)
			}
		}
	}
	if len(reserved) > 0 {
		deps.PeerListeners = reserved[:1]
	}
	if len(reserved) > 1 {
		deps.ConsensusListener = reserved[1]
	}
	return deps, nil
}

func (c *Cluster) config(m *Member) consensus.Config {
	cfg := consensus.DefaultConfig()
	cfg.Name = m.Name
	cfg.DataDir = m.DataDir
	cfg.ListenPeerURLs = []string{m.PeerURL}
	cfg.InitialAdvertisePeerURLs = []string{m.PeerURL}
	cfg.InitialCluster = m.initial
	cfg.InitialClusterState = m.state
	cfg.InitialClusterToken = "consensustest"
	cfg.HeartbeatInterval = c.opts.HeartbeatInterval
	cfg.ElectionTimeout = c.opts.ElectionTimeout
	cfg.AdvertiseClientURLs = []string{"http://127.0.0.1:1"}
	cfg.ListenConsensusURL = ""
	if m.APIAddr != "" {
		cfg.ListenConsensusURL = "http://" + m.APIAddr
	}
	cfg.AdvertiseStorageURL = "inproc://" + m.Name
	cfg.SnapshotCount = c.opts.SnapshotCount
	cfg.SnapshotCatchUpEntries = c.opts.SnapshotCatchUpEntries
	cfg.WALSegmentSize = c.opts.WALSegmentSize
	if c.opts.Configure != nil {
		c.opts.Configure(&cfg)
	}
	return cfg
}

// testLogger discards logs unless CAIRN_TEST_LOG is set (to a level name).
func testLogger(member string) *slog.Logger {
	level, ok := os.LookupEnv("CAIRN_TEST_LOG")
	if !ok {
		return slog.New(slog.DiscardHandler)
	}
	l, err := obs.ParseLevel(level)
	if err != nil {
		l = slog.LevelInfo
	}
	return obs.NewLogger(os.Stderr, "consensus", member, l)
}

// Members returns every member, running or not.
func (c *Cluster) Members() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Member(nil), c.members...)
}

// Running returns the members whose node is up.
func (c *Cluster) Running() []*Member {
	var up []*Member
	for _, m := range c.Members() {
		if n := m.Node(); n != nil {
			select {
			case <-n.Done():
			default:
				up = append(up, m)
			}
		}
	}
	return up
}

// WaitLeader waits until every running member agrees on one running leader, and returns it.
func (c *Cluster) WaitLeader(timeout time.Duration) *Member {
	c.t.Helper()
	var leader *Member
	waittest.Until(c.t, timeout, 5*time.Millisecond, "a leader all running members agree on", func() bool {
		leader = c.agreedLeader()
		return leader != nil
	})
	return leader
}

func (c *Cluster) agreedLeader() *Member {
	running := c.Running()
	if len(running) == 0 {
		return nil
	}
	lead := running[0].Node().Leader()
	for _, m := range running {
		if m.Node().Leader() != lead {
			return nil
		}
	}
	for _, m := range running {
		if m.Node().ID() == lead {
			return m
		}
	}
	return nil
}

// StopAll stops every running member.
func (c *Cluster) StopAll() {
	var wg sync.WaitGroup
	for _, m := range c.Members() {
		wg.Add(1)
		go func() { defer wg.Done(); m.Stop() }()
	}
	wg.Wait()
}

// KillAll kills every running member at once.
func (c *Cluster) KillAll() {
	for _, m := range c.Members() {
		m.Kill()
	}
}

// Partition cuts m off from every other member (messages both ways are dropped at m).
func (c *Cluster) Partition(m *Member) {
	for _, other := range c.Members() {
		if other != m && other.Node() != nil {
			m.Faults.Block(other.Node().ID())
		}
	}
}

// Heal reconnects m.
func (c *Cluster) Heal(m *Member) {
	for _, other := range c.Members() {
		if other != m && other.Node() != nil {
			m.Faults.Unblock(other.Node().ID())
		}
	}
}

// WaitHealthy waits until every running member has been connected to every other for the member's
// HealthInterval, so --strict-reconfig-check lets membership changes through.
func (c *Cluster) WaitHealthy(timeout time.Duration) {
	c.t.Helper()
	waittest.Until(c.t, timeout, 5*time.Millisecond, "every member connected for its health interval", func() bool {
		running := c.Running()
		for _, m := range running {
			n := m.Node()
			for _, other := range running {
				if other == m {
					continue
				}
				since := n.PeerActiveSince(other.Node().ID())
				if since.IsZero() || time.Since(since) < n.HealthInterval() {
					return false
				}
			}
		}
		return true
	})
}

// WaitPublished waits until every running member knows every member's attributes (name and storage
// URL), that is until each member's publish has been applied everywhere.
func (c *Cluster) WaitPublished(timeout time.Duration) {
	c.t.Helper()
	waittest.Until(c.t, timeout, 5*time.Millisecond, "every member's attributes published to every member", func() bool {
		for _, m := range c.Running() {
			st, err := m.Node().Status(context.Background())
			if err != nil {
				return false
			}
			for _, member := range st.Members {
				if member.Name == "" || member.StorageURL == "" {
					return false
				}
			}
		}
		return true
	})
}

// Options returns the cluster's options, defaults filled in.
func (c *Cluster) Options() Options { return c.opts }
