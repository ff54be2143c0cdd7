package consensus

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/services/consensus/transport"
)

// Cluster states for --initial-cluster-state.
const (
	ClusterStateNew      = "new"
	ClusterStateExisting = "existing"
)

// DefaultLogEntriesInMemory is Config.LogEntriesInMemory's default: a few tenths of a second of writes at
// etcd's benchmark rates, which a follower or a storage keeping up never reads past.
const DefaultLogEntriesInMemory = 1000

// Config configures one consensus member. Flag names and defaults are etcd's where etcd has the setting.
type Config struct {
	// Name is this member's human-readable name (--name).
	Name string
	// DataDir holds the WAL (--data-dir).
	DataDir string
	// ListenPeerURLs are where this member serves its peers (--listen-peer-urls).
	ListenPeerURLs []string
	// InitialAdvertisePeerURLs are this member's peer URLs as the cluster knows them
	// (--initial-advertise-peer-urls).
	InitialAdvertisePeerURLs []string
	// InitialCluster is name=peerURL,... for bootstrapping (--initial-cluster); a name may repeat for
	// several URLs.
	InitialCluster string
	// InitialClusterState is "new" to bootstrap a cluster or "existing" to join one (--initial-cluster-state).
	InitialClusterState string
	// InitialClusterToken makes member and cluster IDs unique to one bootstrap (--initial-cluster-token).
	InitialClusterToken string
	// HeartbeatInterval is raft's tick (--heartbeat-interval, milliseconds).
	HeartbeatInterval time.Duration
	// ElectionTimeout is raft's election timeout (--election-timeout, milliseconds).
	ElectionTimeout time.Duration
	// AdvertiseClientURLs are the URLs clients reach this member's frontend at (--advertise-client-urls);
	// they are published in the member's attributes, as etcd does.
	AdvertiseClientURLs []string
	// ListenConsensusURL is where this member serves the Consensus API to storage and frontend
	// (--listen-consensus-url); empty serves nothing (in-process use).
	ListenConsensusURL string
	// AdvertiseStorageURL is where this member's storage serves its internal API (--advertise-storage-url);
	// snapshots taken here name it as their source.
	AdvertiseStorageURL string
	// SnapshotCount is how many applied entries (as storage reports through Compact) accumulate before
	// consensus takes a new raft snapshot and compacts its log (--snapshot-count).
	SnapshotCount uint64
	// SnapshotCatchUpEntries is how many entries are kept below a snapshot so slow followers can catch up
	// from the log instead of a snapshot (--snapshot-catchup-entries).
	SnapshotCatchUpEntries uint64
	// LogEntriesInMemory is how many entries below the applied index the log keeps in memory; the rest of the
	// catch-up window is read back from the WAL. 0 means DefaultLogEntriesInMemory; it is never more than
	// SnapshotCatchUpEntries.
	LogEntriesInMemory uint64
	// MaxRequestBytes is the largest proposal accepted (--max-request-bytes).
	MaxRequestBytes int
	// MaxLearners is the most learners the cluster may have (--max-learners).
	MaxLearners int
	// StrictReconfigCheck refuses membership changes that could lose quorum (--strict-reconfig-check).
	StrictReconfigCheck bool

	// WALSegmentSize is the WAL's segment size; 0 means 64 MiB.
	WALSegmentSize int64
}

// Deps are what a member takes from the process that runs it: where it reports, and the listeners the caller
// bound (nats-server's tests bind port 0 first the same way), so no port is picked free and bound later.
type Deps struct {
	// Logger, Telemetry and Registry are where the member reports; nil means slog.Default, no tracing, no
	// metrics.
	Logger    *slog.Logger
	Telemetry *obs.Telemetry
	Registry  prometheus.Registerer
	// PeerListeners, when set, are served instead of listening on Config.ListenPeerURLs; ConsensusListener
	// likewise for Config.ListenConsensusURL. The member closes them when it stops.
	PeerListeners     []net.Listener
	ConsensusListener net.Listener
	// Faults drops messages to and from chosen members (tests only).
	Faults *transport.Faults
	// Dialer, when set, makes the raft transport's connections to peers (addr is host:port) instead of TCP:
	// tests run members on an in-memory network (internal/testing/memnet) inside a synctest bubble. Joining
	// and promotion calls still dial TCP.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// Peer, when set, makes the raft peer links mutual TLS (etcd's --peer-* flags): the peer port serves TLS
	// and every member is dialed with it. Required when a peer URL is https://; nil: plain.
	Peer *tlsconfig.Link
	// Internal, when set, makes the Consensus port (the storage's propose and committed links, its gRPC)
	// mutual TLS (--internal-* flags); nil: plain.
	Internal *tlsconfig.Link
}

// checkPeerTLS refuses an https:// peer URL without peer TLS, with etcd's message, and an http:// one with it:
// the peer port then serves only TLS, which its URL must say.
func checkPeerTLS(cfg Config, peer *tlsconfig.Link) error {
	for _, u := range append(slices.Clone(cfg.ListenPeerURLs), cfg.InitialAdvertisePeerURLs...) {
		switch secure := strings.HasPrefix(u, "https://"); {
		case secure && !peer.Enabled():
			return config.Invalid("--peer-cert-file", "TLS key/cert (--peer-cert-file, --peer-key-file) must be provided for peer url %s with HTTPS scheme", u)
		case !secure && peer.Enabled():
			return config.Invalid("--listen-peer-urls", "--listen-peer-urls and --initial-advertise-peer-urls must be https:// with --peer-cert-file (got %s)", u)
		}
	}
	return nil
}

// withDefaults fills what is nil: no telemetry, and slog's default logger.
func (d Deps) withDefaults() Deps {
	d.Telemetry, d.Logger = obs.ServiceDefaults(d.Telemetry, d.Logger)
	return d
}

// DefaultConfig returns etcd's defaults (and Cairn's for the settings etcd lacks).
func DefaultConfig() Config {
	return Config{
		Name:                     "default",
		DataDir:                  "default.consensus",
		ListenPeerURLs:           []string{"http://127.0.0.1:2380"},
		InitialAdvertisePeerURLs: []string{"http://127.0.0.1:2380"},
		InitialCluster:           "default=http://127.0.0.1:2380",
		InitialClusterState:      ClusterStateNew,
		InitialClusterToken:      "etcd-cluster",
		HeartbeatInterval:        100 * time.Millisecond,
		ElectionTimeout:          1000 * time.Millisecond,
		AdvertiseClientURLs:      []string{"http://127.0.0.1:2379"},
		ListenConsensusURL:       "http://127.0.0.1:2390",
		AdvertiseStorageURL:      "http://127.0.0.1:23790",
		SnapshotCount:            10000,
		SnapshotCatchUpEntries:   5000,
		LogEntriesInMemory:       DefaultLogEntriesInMemory,
		MaxRequestBytes:          1572864,
		MaxLearners:              1,
		StrictReconfigCheck:      true,
	}
}

// RegisterFlags binds the configuration to etcd-named flags on fs; the current values are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, "name", c.Name, "Human-readable name for this member.")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "Path to the consensus data directory (WAL).")
	fs.Var((*config.URLList)(&c.ListenPeerURLs), "listen-peer-urls", "List of URLs to listen on for peer traffic.")
	fs.Var((*config.URLList)(&c.InitialAdvertisePeerURLs), "initial-advertise-peer-urls", "List of this member's peer URLs to advertise to the rest of the cluster.")
	fs.StringVar(&c.InitialCluster, "initial-cluster", c.InitialCluster, "Initial cluster configuration for bootstrapping (name=url,...).")
	fs.StringVar(&c.InitialClusterState, "initial-cluster-state", c.InitialClusterState, "Initial cluster state ('new' or 'existing').")
	fs.StringVar(&c.InitialClusterToken, "initial-cluster-token", c.InitialClusterToken, "Initial cluster token for the cluster during bootstrap.")
	fs.Var((*millis)(&c.HeartbeatInterval), "heartbeat-interval", "Time (in milliseconds) of a heartbeat interval.")
	fs.Var((*millis)(&c.ElectionTimeout), "election-timeout", "Time (in milliseconds) for an election to timeout.")
	fs.Var((*config.URLList)(&c.AdvertiseClientURLs), "advertise-client-urls", "List of this member's client URLs to advertise to the public.")
	fs.StringVar(&c.ListenConsensusURL, "listen-consensus-url", c.ListenConsensusURL, "URL to serve the Consensus API on for storage and frontend.")
	fs.StringVar(&c.AdvertiseStorageURL, "advertise-storage-url", c.AdvertiseStorageURL, "URL of this member's storage, named as the source of its snapshots.")
	fs.Uint64Var(&c.SnapshotCount, "snapshot-count", c.SnapshotCount, "Number of applied entries to trigger a snapshot of the log.")
	fs.Uint64Var(&c.SnapshotCatchUpEntries, "snapshot-catchup-entries", c.SnapshotCatchUpEntries, "Number of entries kept below a snapshot for slow followers.")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "Maximum proposal size in bytes.")
	fs.IntVar(&c.MaxLearners, "max-learners", c.MaxLearners, "The maximum number of learners allowed in the cluster.")
	fs.BoolVar(&c.StrictReconfigCheck, "strict-reconfig-check", c.StrictReconfigCheck, "Reject reconfiguration requests that would cause quorum loss.")
}

// maxElectionMs is etcd's longest --election-timeout.
const maxElectionMs = 50000

// ValidateElection checks --heartbeat-interval and --election-timeout as etcd does (embed.Config.Validate),
// with etcd's words; `cairn up` checks them before it starts any member.
func ValidateElection(heartbeat, election time.Duration) error {
	heartbeatMs, electionMs := heartbeat.Milliseconds(), election.Milliseconds()
	switch {
	case heartbeatMs <= 0:
		return config.Invalid("--heartbeat-interval", "--heartbeat-interval must be >0 (set to %dms)", heartbeatMs)
	case electionMs <= 0:
		return config.Invalid("--election-timeout", "--election-timeout must be >0 (set to %dms)", electionMs)
	case 5*heartbeatMs > electionMs:
		return config.Invalid("--election-timeout", "--election-timeout[%vms] should be at least as 5 times as --heartbeat-interval[%vms]",
			electionMs, heartbeatMs)
	case electionMs > maxElectionMs:
		return config.Invalid("--election-timeout", "--election-timeout[%vms] is too long, and should be set less than %vms",
			electionMs, maxElectionMs)
	}
	return nil
}

// Validate checks the configuration the way etcd checks its flags: one config.FieldError per refused flag.
func (c *Config) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, config.Invalid("--name", "--name must not be empty"))
	}
	if c.DataDir == "" {
		errs = append(errs, config.Invalid("--data-dir", "--data-dir must not be empty"))
	}
	for flagName, urls := range map[string][]string{
		"--listen-peer-urls": c.ListenPeerURLs, "--initial-advertise-peer-urls": c.InitialAdvertisePeerURLs,
	} {
		if err := validateURLs(urls); err != nil {
			errs = append(errs, config.Invalid(flagName, "%w", err))
		}
	}
	if err := ValidateElection(c.HeartbeatInterval, c.ElectionTimeout); err != nil {
		errs = append(errs, err)
	}
	if c.InitialClusterState != ClusterStateNew && c.InitialClusterState != ClusterStateExisting {
		errs = append(errs, config.Invalid("--initial-cluster-state", "--initial-cluster-state %q: want %q or %q", c.InitialClusterState,
			ClusterStateNew, ClusterStateExisting))
	}
	if _, err := parseInitialCluster(c.InitialCluster); err != nil {
		errs = append(errs, &config.FieldError{Field: "--initial-cluster", Err: err})
	}
	if c.MaxRequestBytes <= 0 {
		errs = append(errs, config.Invalid("--max-request-bytes", "--max-request-bytes must be positive"))
	}
	if c.MaxLearners < 0 {
		errs = append(errs, config.Invalid("--max-learners", "--max-learners must not be negative"))
	}
	if c.SnapshotCount == 0 {
		errs = append(errs, config.Invalid("--snapshot-count", "--snapshot-count must be positive"))
	}
	return errors.Join(errs...)
}

// verifyBootstrap checks that --initial-cluster names this member with its advertised peer URLs; like
// etcd, only a member without a WAL (bootstrapping or joining) is held to it.
func (c *Config) verifyBootstrap() error {
	cluster, err := parseInitialCluster(c.InitialCluster)
	if err != nil {
		return err
	}
	own, ok := cluster[c.Name]
	if !ok {
		return fmt.Errorf("--initial-cluster %q has no member named %q", c.InitialCluster, c.Name)
	}
	advertised := slices.Sorted(slices.Values(c.InitialAdvertisePeerURLs))
	if !slices.Equal(own, advertised) {
		return fmt.Errorf("--initial-cluster has %s=%s but --initial-advertise-peer-urls is %s", c.Name,
			strings.Join(own, ","), strings.Join(advertised, ","))
	}
	return nil
}

// parseInitialCluster reads name=url,... into sorted URLs per name.
func parseInitialCluster(s string) (map[string][]string, error) {
	cluster := map[string][]string{}
	for _, part := range strings.Split(s, ",") {
		name, u, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--initial-cluster: %q is not name=url", part)
		}
		if err := validateURLs([]string{u}); err != nil {
			return nil, fmt.Errorf("--initial-cluster: %w", err)
		}
		cluster[name] = append(cluster[name], u)
	}
	for name := range cluster {
		slices.Sort(cluster[name])
	}
	return cluster, nil
}

// validateURLs accepts what etcd's types.NewURLs accepts: http(s)://host:port with no path.
func validateURLs(urls []string) error {
	for _, s := range urls {
		if err := config.CheckEtcdURL(s); err != nil {
			return err
		}
		u, err := url.Parse(s)
		if err != nil {
			return fmt.Errorf("bad URL %q: %w", s, err)
		}
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return fmt.Errorf(`URL address does not have the form "host:port": %s`, s)
		}
		if u.Path != "" && u.Path != "/" {
			return fmt.Errorf("URL must not contain a path: %s", s)
		}
	}
	return nil
}

// electionTicks is the election timeout in heartbeat ticks.
func (c *Config) electionTicks() int { return int(c.ElectionTimeout / c.HeartbeatInterval) }

// requestTimeout is how long a membership change or read barrier may take (etcd's ReqTimeout).
func (c *Config) requestTimeout() time.Duration { return 5*time.Second + 2*c.ElectionTimeout }

// millis is a time.Duration flag given in milliseconds, as etcd's are.
type millis time.Duration

func (m *millis) String() string { return strconv.FormatInt(time.Duration(*m).Milliseconds(), 10) }

func (m *millis) Set(s string) error {
	ms, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return fmt.Errorf("want milliseconds: %w", err)
	}
	*m = millis(time.Duration(ms) * time.Millisecond)
	return nil
}
