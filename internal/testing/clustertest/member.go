package clustertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/consensusclient"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
	"github.com/cairn-kv/cairn/services/frontend"
	"github.com/cairn-kv/cairn/services/storage"
)

// stopTimeout bounds every graceful stop.
const stopTimeout = 30 * time.Second

// Member is one member: a consensus node and its storage, each of which can be stopped and restarted.
type Member struct {
	Name string
	// StorageURL is where the member's storage serves (the same across restarts).
	StorageURL string
	// ClientURL is the URL of the frontend named after the member ("" when there is none); consensus publishes
	// it as the member's client URL, so MemberList points clients at it.
	ClientURL string
	cluster   *Cluster
	consensus *consensustest.Member
	dataDir   string

	mu       sync.Mutex
	storage  *storage.Member
	remote   *consensusclient.Client // the storage's log when it is remote
	reserved net.Listener            // StorageURL, bound before the cluster starts; served by the first start
}

// ID is the member's ID.
func (m *Member) ID() uint64 { return m.consensus.Node().ID() }

// Node is the member's current consensus node.
func (m *Member) Node() *consensus.Node { return m.consensus.Node() }

// ConsensusURL is the member's consensus API URL.
func (m *Member) ConsensusURL() string { return "http://" + m.consensus.APIAddr }

// Storage is the member's running storage, or nil while it is stopped.
func (m *Member) Storage() *storage.Storage {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.storage == nil {
		return nil
	}
	return m.storage.Storage
}

// StorageDataDir is the storage's data directory.
func (m *Member) StorageDataDir() string { return m.dataDir }

// StopConsensus stops the member's consensus gracefully.
func (m *Member) StopConsensus() { m.consensus.Stop() }

// KillConsensus stops the member's consensus as a crash would (unsynced WAL writes are lost).
func (m *Member) KillConsensus() { m.consensus.Kill() }

// RestartConsensus starts the member's consensus again from its WAL.
func (m *Member) RestartConsensus() error { return m.consensus.Restart() }

// StartStorage starts the member's storage from its data directory (after a stop, it resumes where it was).
func (m *Member) StartStorage() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.storage != nil {
		return fmt.Errorf("member %s: storage already running", m.Name)
	}
	log, err := m.newLog()
	if err != nil {
		return err
	}
	cfg := storage.Config{MemberID: m.ID(), DataDir: m.dataDir, ListenURL: m.StorageURL,
		BatchInterval: 10 * time.Millisecond, LogCompactInterval: 100 * time.Millisecond}
	if m.cluster.opts.ConfigureStorage != nil {
		m.cluster.opts.ConfigureStorage(&cfg)
	}
	deps := storage.Deps{Log: log, Telemetry: m.cluster.opts.Telemetry, Logger: logger("storage", m.Name),
		Listener: m.reserved}
	m.reserved = nil // a restart binds StorageURL again
	if keyring := m.cluster.opts.StorageKeyring; keyring != nil {
		deps.Keyring = keyring(m.Name)
	}
	st, err := storage.Assemble(context.Background(), cfg, deps, m.cluster.storageBus())
	if err == nil {
		err = st.Start(context.Background())
	}
	if err != nil {
		m.closeRemote()
		if deps.Listener != nil {
			_ = deps.Listener.Close()
		}
		return fmt.Errorf("member %s: %w", m.Name, err)
	}
	m.storage = st
	return nil
}

func (m *Member) newLog() (commitlog.Log, error) {
	if m.cluster.opts.InProcessLog {
		return liveLog{m.consensus}, nil
	}
	client, err := consensusclient.New(consensusclient.Config{Target: m.ConsensusURL(), Telemetry: m.cluster.opts.Telemetry,
		Logger: logger("consensusclient", m.Name)})
	if err != nil {
		return nil, err
	}
	m.remote = client
	return client, nil
}

func (m *Member) closeRemote() {
	if m.remote != nil {
		_ = m.remote.Close()
		m.remote = nil
	}
}

// StopStorage stops the member's storage gracefully (a no-op when it is stopped).
func (m *Member) StopStorage() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.storage == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	_ = m.storage.Stop(ctx)
	m.storage = nil
	m.closeRemote()
}

// WipeStorage deletes the stopped storage's data directory, so the next start begins empty and must catch up
// from the log or, once the log is compacted, from another member's snapshot.
func (m *Member) WipeStorage() error {
	if m.Storage() != nil {
		return fmt.Errorf("member %s: stop the storage before wiping it", m.Name)
	}
	return os.RemoveAll(m.dataDir)
}

// liveLog is the member's current in-process consensus node as a commitlog.Log, so a storage keeps working
// across consensus restarts (each restart is a new Node).
type liveLog struct{ m *consensustest.Member }

var errNoNode = status.Error(codes.Unavailable, "testcluster: consensus is not running")

func (l liveLog) node() (*consensus.Node, error) {
	n := l.m.Node()
	if n == nil {
		return nil, errNoNode
	}
	select {
	case <-n.Done():
		return nil, errNoNode
	default:
		return n, nil
	}
}

func (l liveLog) Propose(ctx context.Context, data []byte) error {
	n, err := l.node()
	if err != nil {
		return err
	}
	return n.Propose(ctx, data)
}

func (l liveLog) Committed(ctx context.Context, fromIndex uint64, deliver func([]commitlog.Entry) error) error {
	n, err := l.node()
	if err != nil {
		return err
	}
	return n.Committed(ctx, fromIndex, deliver)
}

func (l liveLog) ReadIndex(ctx context.Context) (uint64, error) {
	n, err := l.node()
	if err != nil {
		return 0, err
	}
	return n.ReadIndex(ctx)
}

func (l liveLog) Compact(ctx context.Context, appliedIndex uint64) error {
	n, err := l.node()
	if err != nil {
		return err
	}
	return n.Compact(ctx, appliedIndex)
}

func (l liveLog) Status(ctx context.Context) (commitlog.Status, error) {
	n, err := l.node()
	if err != nil {
		return commitlog.Status{}, err
	}
	return n.Status(ctx)
}

// Frontend is one frontend of the cluster; it keeps its URL across restarts.
type Frontend struct {
	Name    string
	URL     string
	cluster *Cluster

	mu       sync.Mutex
	fe       *frontend.Frontend
	reserved net.Listener // bound before the cluster starts, so no other process takes the port
}

// Frontend is the running frontend, or nil while it is stopped.
func (f *Frontend) Frontend() *frontend.Frontend {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fe
}

// Config is the frontend's configuration: every member's consensus endpoint, storages discovered.
func (f *Frontend) Config() frontend.Config {
	cfg := frontend.DefaultConfig()
	cfg.Name = f.Name
	cfg.ListenClientURLs = []string{f.URL}
	cfg.AdvertiseClientURLs = []string{f.URL}
	cfg.ConsensusEndpoints = f.cluster.ConsensusEndpoints()
	cfg.ProbeInterval = 100 * time.Millisecond
	cfg.LeaseEndpoints = f.cluster.LeasekeeperURLs()
	cfg.WatchEndpoints = f.cluster.WatchhubURLs()
	cfg.RelaySecret = RelaySecret
	if f.cluster.opts.ConfigureFrontend != nil {
		f.cluster.opts.ConfigureFrontend(&cfg)
	}
	return cfg
}

// Start starts the frontend.
func (f *Frontend) Start() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fe != nil {
		return fmt.Errorf("frontend %s already running", f.Name)
	}
	cfg := f.Config()
	lis := f.reserved
	f.reserved = nil
	if lis == nil { // a restart: the port was free while the frontend was down
		var err error
		if lis, err = net.Listen("tcp", strings.TrimPrefix(f.URL, "http://")); err != nil {
			return fmt.Errorf("frontend %s: %w", f.Name, err)
		}
	}
	fe, err := frontend.New(cfg, frontend.Deps{Telemetry: f.cluster.opts.Telemetry, Logger: logger("frontend", f.Name),
		ClientListeners: []net.Listener{lis}})
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("frontend %s: %w", f.Name, err)
	}
	if err := fe.Start(context.Background()); err != nil {
		return fmt.Errorf("frontend %s: %w", f.Name, err)
	}
	f.fe = fe
	return nil
}

// Stop stops the frontend (a no-op when it is stopped).
func (f *Frontend) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fe == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	_ = f.fe.Stop(ctx)
	f.fe = nil
}
