package storage

import (
	"errors"
	"flag"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/etcdcheck"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// Defaults, as etcd's where etcd has the setting.
const (
	DefaultListenURL            = "http://127.0.0.1:23790"
	DefaultBatchInterval        = 100 * time.Millisecond
	DefaultBatchLimit           = 10000
	DefaultRequestTimeout       = 7 * time.Second // etcd: 5s + 2 × election timeout
	DefaultQuotaBackendBytes    = int64(2 << 30)  // etcd's --quota-backend-bytes default
	DefaultMinLeaseTTL          = 2               // seconds; etcd's with its default election timeout
	DefaultCompactionBatchLimit = 1000
	DefaultCompactionSleep      = 10 * time.Millisecond
	DefaultLogCompactInterval   = time.Second
	// DefaultAutoCompactionMode and DefaultAutoCompactionRetention are etcd's: periodic, and "0" (off).
	DefaultAutoCompactionMode      = AutoCompactionPeriodic
	DefaultAutoCompactionRetention = "0"
	// DefaultAutoCompactionRevisionInterval is how often etcd's revision mode compacts (v3compactor's revInterval).
	DefaultAutoCompactionRevisionInterval = 5 * time.Minute
	// DefaultCompactHashCheckTime is etcd's --experimental-compact-hash-check-time.
	DefaultCompactHashCheckTime = time.Minute
)

// The values of --auto-compaction-mode, as etcd's.
const (
	AutoCompactionPeriodic = "periodic"
	AutoCompactionRevision = "revision"
)

// Config configures a storage service. Zero fields take the defaults; Validate reports what is unusable.
type Config struct {
	// MemberID is this member's ID (request IDs are prefixed with it, NOSPACE alarms name it).
	MemberID uint64
	// DataDir holds the bbolt file (storage.db) and snapshot downloads.
	DataDir string
	// ListenURL is where the Storage gRPC service listens, http://host:port (port 0 picks one).
	ListenURL string
	// AdminAddr is host:port for /metrics and /health; empty serves none.
	AdminAddr string
	// BatchInterval and BatchLimit bound how long and how many applied entries wait for one bbolt commit.
	BatchInterval time.Duration
	BatchLimit    int
	// RequestTimeout bounds a Submit (proposal to apply) and a linearizable read's wait.
	RequestTimeout time.Duration
	// QuotaBackendBytes is etcd's --quota-backend-bytes: writes that would grow the database past it raise the
	// NOSPACE alarm and are refused. 0 means the default (2 GiB), negative disables the quota.
	QuotaBackendBytes int64
	// MaxTxnOps and MaxRequestBytes are etcd's --max-txn-ops (128) and --max-request-bytes (1.5 MiB).
	MaxTxnOps       int
	MaxRequestBytes int
	// MinLeaseTTL is the smallest TTL granted, in seconds.
	MinLeaseTTL int64
	// CompactionBatchLimit and CompactionSleepInterval pace physical compaction.
	CompactionBatchLimit    int
	CompactionSleepInterval time.Duration
	// LogCompactInterval is how often the durable applied index is reported to the log through Compact.
	LogCompactInterval time.Duration
	// AutoCompactionMode and AutoCompactionRetention are etcd's --auto-compaction-mode (periodic|revision) and
	// --auto-compaction-retention: periodic keeps history for a duration ("1h", "30m", or an integer meaning
	// hours), revision keeps the last N revisions; "0" turns auto-compaction off. See autocompact.go.
	AutoCompactionMode      string
	AutoCompactionRetention string
	// AutoCompactionRevisionInterval is how often revision mode compacts (etcd: 5 minutes). Not a flag: tests
	// shorten it.
	AutoCompactionRevisionInterval time.Duration
	// InitialCorruptCheck is etcd's --experimental-initial-corrupt-check: Start compares this member's HashKV
	// with the other members' at its revision and refuses to start when one differs (see corrupt.go).
	InitialCorruptCheck bool
	// CompactHashCheckEnabled and CompactHashCheckTime are etcd's --experimental-compact-hash-check-enabled and
	// --experimental-compact-hash-check-time: the leader's storage compares the hashes compactions recorded with
	// its peers' every CompactHashCheckTime and raises the CORRUPT alarm through the log on a mismatch.
	CompactHashCheckEnabled bool
	CompactHashCheckTime    time.Duration
}

// Deps are what a storage takes from the process that runs it: where it reports, the listener the caller bound,
// and its two boundaries, the log it applies and the sink its applied records go to.
type Deps struct {
	// Logger and Telemetry are where the storage reports; nil: slog.Default and no tracing.
	Logger    *slog.Logger
	Telemetry *obs.Telemetry
	// Registry receives the storage's metrics; nil means a registry of its own (obs.NewRegistry). A process
	// that runs several services passes one registry to all of them and serves it on one admin endpoint.
	Registry *prometheus.Registry
	// Listener, when set, is served instead of listening on Config.ListenURL; the storage closes it when it
	// stops.
	Listener net.Listener
	// Log is the member's committed log (its consensus, in-process or remote); required.
	Log commitlog.Log
	// Sink receives every applied record; nil drops them.
	Sink AppliedSink
	// Keyring seals the values of writes before they are proposed and opens them for readers (see seal.go);
	// nil stores values plain. Every member of a cluster must open what the others seal: they share the
	// encryption configuration. The caller owns it (closes it after Stop).
	Keyring *seal.Keyring
	// Internal, when set, makes every link this service serves and dials mutual TLS (--internal-* flags); nil:
	// plain.
	Internal *tlsconfig.Link
}

// ErrNoLog is returned by New when Deps.Log is nil.
var ErrNoLog = errors.New("storage: deps: Log is required")

// withDefaults fills the optional deps.
func (d Deps) withDefaults() Deps {
	if d.Sink == nil {
		d.Sink = NopSink{}
	}
	d.Telemetry, d.Logger = obs.ServiceDefaults(d.Telemetry, d.Logger)
	return d
}

// DefaultConfig returns the defaults (DataDir is left for the caller).
func DefaultConfig() Config { return Config{}.WithDefaults() }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.ListenURL == "" {
		c.ListenURL = DefaultListenURL
	}
	if c.BatchInterval == 0 {
		c.BatchInterval = DefaultBatchInterval
	}
	if c.BatchLimit == 0 {
		c.BatchLimit = DefaultBatchLimit
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.QuotaBackendBytes == 0 {
		c.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = etcdcheck.DefaultMaxTxnOps
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = etcdcheck.DefaultMaxRequestBytes
	}
	if c.MinLeaseTTL == 0 {
		c.MinLeaseTTL = DefaultMinLeaseTTL
	}
	if c.CompactionBatchLimit == 0 {
		c.CompactionBatchLimit = DefaultCompactionBatchLimit
	}
	if c.CompactionSleepInterval == 0 {
		c.CompactionSleepInterval = DefaultCompactionSleep
	}
	if c.LogCompactInterval == 0 {
		c.LogCompactInterval = DefaultLogCompactInterval
	}
	if c.AutoCompactionMode == "" {
		c.AutoCompactionMode = DefaultAutoCompactionMode
	}
	if c.AutoCompactionRetention == "" {
		c.AutoCompactionRetention = DefaultAutoCompactionRetention
	}
	if c.AutoCompactionRevisionInterval == 0 {
		c.AutoCompactionRevisionInterval = DefaultAutoCompactionRevisionInterval
	}
	if c.CompactHashCheckTime == 0 {
		c.CompactHashCheckTime = DefaultCompactHashCheckTime
	}
	return c
}

// RegisterFlags binds the configuration to flags on fs, with etcd's names where etcd has the setting; the current
// values (after WithDefaults) are shown as the defaults. MemberID is not a flag: it is the member's consensus ID.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	*c = c.WithDefaults()
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "Path to the storage data directory (storage.db).")
	fs.StringVar(&c.ListenURL, "listen-storage-url", c.ListenURL, "URL to serve the Storage API on for frontends, watchhubs, leasekeepers and peer storages.")
	fs.DurationVar(&c.BatchInterval, "backend-batch-interval", c.BatchInterval, "Maximum time before committing the backend transaction.")
	fs.IntVar(&c.BatchLimit, "backend-batch-limit", c.BatchLimit, "Maximum applied entries before committing the backend transaction.")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "Longest wait for a write to apply or a linearizable read to catch up.")
	fs.Int64Var(&c.QuotaBackendBytes, "quota-backend-bytes", c.QuotaBackendBytes, "Raise alarms when backend size exceeds the given quota (negative disables it).")
	fs.IntVar(&c.MaxTxnOps, "max-txn-ops", c.MaxTxnOps, "Maximum number of operations permitted in a transaction.")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "Maximum client request size in bytes the server will accept.")
	fs.Int64Var(&c.MinLeaseTTL, "min-lease-ttl", c.MinLeaseTTL, "Smallest lease TTL granted, in seconds.")
	fs.IntVar(&c.CompactionBatchLimit, "compaction-batch-limit", c.CompactionBatchLimit, "Maximum number of revisions deleted in each compaction batch.")
	fs.DurationVar(&c.CompactionSleepInterval, "compaction-sleep-interval", c.CompactionSleepInterval, "Sleep interval between each compaction batch.")
	fs.DurationVar(&c.LogCompactInterval, "log-compact-interval", c.LogCompactInterval, "How often the durably applied index is reported to consensus, which may then compact its log.")
	c.RegisterIntegrityFlags(fs)
}

// RegisterIntegrityFlags binds etcd's auto-compaction and corruption-check flags on fs; `cairn dev` and
// `cairn up` register them too and pass them to every storage.
func (c *Config) RegisterIntegrityFlags(fs *flag.FlagSet) {
	*c = c.WithDefaults()
	fs.StringVar(&c.AutoCompactionMode, "auto-compaction-mode", c.AutoCompactionMode, "interpret 'auto-compaction-retention' one of: periodic|revision. 'periodic' for duration based retention, defaulting to hours if no time unit is provided (e.g. '5m'). 'revision' for revision number based retention.")
	fs.StringVar(&c.AutoCompactionRetention, "auto-compaction-retention", c.AutoCompactionRetention, "Auto compaction retention for mvcc key value store. 0 means disable auto compaction.")
	fs.BoolVar(&c.InitialCorruptCheck, "experimental-initial-corrupt-check", c.InitialCorruptCheck, "Enable to check data corruption before serving any client/peer traffic.")
	fs.BoolVar(&c.CompactHashCheckEnabled, "experimental-compact-hash-check-enabled", c.CompactHashCheckEnabled, "Enable leader to periodically check followers compaction hashes.")
	fs.DurationVar(&c.CompactHashCheckTime, "experimental-compact-hash-check-time", c.CompactHashCheckTime, "Duration of time between leader checks followers compaction hashes.")
}

// SetIntegrity copies the settings RegisterIntegrityFlags binds from from (a parent's flags) into c.
func (c *Config) SetIntegrity(from Config) {
	c.AutoCompactionMode, c.AutoCompactionRetention = from.AutoCompactionMode, from.AutoCompactionRetention
	c.InitialCorruptCheck = from.InitialCorruptCheck
	c.CompactHashCheckEnabled, c.CompactHashCheckTime = from.CompactHashCheckEnabled, from.CompactHashCheckTime
}

// IntegrityArgs returns the flags RegisterIntegrityFlags binds that differ from the defaults, for a parent
// (`cairn up`) to pass to the storages it starts.
func (c Config) IntegrityArgs() []string {
	c, d := c.WithDefaults(), DefaultConfig()
	var args []string
	if c.AutoCompactionMode != d.AutoCompactionMode {
		args = append(args, "--auto-compaction-mode="+c.AutoCompactionMode)
	}
	if c.AutoCompactionRetention != d.AutoCompactionRetention {
		args = append(args, "--auto-compaction-retention="+c.AutoCompactionRetention)
	}
	if c.InitialCorruptCheck {
		args = append(args, "--experimental-initial-corrupt-check")
	}
	if c.CompactHashCheckEnabled {
		args = append(args, "--experimental-compact-hash-check-enabled")
	}
	if c.CompactHashCheckTime != d.CompactHashCheckTime {
		args = append(args, "--experimental-compact-hash-check-time="+c.CompactHashCheckTime.String())
	}
	return args
}

// Validate reports every unusable setting, one config.FieldError each (named by its flag).
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, config.Invalid("--data-dir", "--data-dir must not be empty"))
	}
	if _, err := config.HostPort(c.ListenURL); err != nil {
		errs = append(errs, config.Invalid("--listen-storage-url", "%w", err))
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{{"--backend-batch-interval", c.BatchInterval}, {"--request-timeout", c.RequestTimeout},
		{"--compaction-sleep-interval", c.CompactionSleepInterval}, {"--log-compact-interval", c.LogCompactInterval},
		{"--experimental-compact-hash-check-time", c.CompactHashCheckTime}} {
		if d.value < 0 {
			errs = append(errs, config.Invalid(d.flag, "%s %v is negative", d.flag, d.value))
		}
	}
	for _, n := range []struct {
		flag  string
		value int64
	}{{"--backend-batch-limit", int64(c.BatchLimit)}, {"--max-txn-ops", int64(c.MaxTxnOps)},
		{"--max-request-bytes", int64(c.MaxRequestBytes)}, {"--compaction-batch-limit", int64(c.CompactionBatchLimit)},
		{"--min-lease-ttl", c.MinLeaseTTL}} {
		if n.value < 0 {
			errs = append(errs, config.Invalid(n.flag, "%s %d is negative", n.flag, n.value))
		}
	}
	if _, _, err := c.autoCompaction(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c Config) limits() etcdcheck.Limits {
	return etcdcheck.Limits{MaxTxnOps: c.MaxTxnOps, MaxRequestBytes: c.MaxRequestBytes}
}
