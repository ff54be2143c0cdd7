package watchhub

import (
	"errors"
	"flag"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// Defaults, as etcd's where etcd has the setting.
const (
	DefaultListenURL              = "http://127.0.0.1:23800"
	DefaultStorageEndpoint        = "http://127.0.0.1:23790"
	DefaultNATSURL                = "nats://127.0.0.1:4222"
	DefaultWindowRevisions        = 10000
	DefaultWindowBytes            = 64 << 20
	DefaultProgressNotifyInterval = 10 * time.Minute // etcd's --watch-progress-notify-interval
	DefaultMaxRequestBytes        = 1572864          // etcd's --max-request-bytes
	DefaultWatcherBufferResponses = 64
	DefaultStreamBufferBytes      = 16 << 20
	DefaultStoragePollInterval    = 500 * time.Millisecond
	DefaultStorageTimeout         = 5 * time.Second
	DefaultHistoryPageSize        = 1000
	DefaultMaxWatchLag            = 5 * time.Second

	// MinProgressNotifyInterval is etcd's floor for the progress notify interval.
	MinProgressNotifyInterval = 100 * time.Millisecond
	// grpcOverheadBytes is what etcd adds to --max-request-bytes for gRPC framing; fragments are cut there.
	grpcOverheadBytes = 512 * 1024
)

// Config configures one watchhub. Zero fields take the defaults (WithDefaults); Validate reports what is
// unusable.
type Config struct {
	// ListenURL is where the Watch gRPC service listens, http://host:port (port 0 picks one) (--listen-url).
	ListenURL string
	// StorageEndpoints are the storages to read history and status from, in order of preference; the hub fails
	// over between them (--storage-endpoints, comma-separated).
	StorageEndpoints []string
	// NATSURL is the event bus (--nats-url; comma-separated for a NATS cluster).
	NATSURL string
	// NATSNkeySeedFile holds the hub's nkey seed on a bus locked down with role nkeys (--nats-nkey-seed-file).
	NATSNkeySeedFile string
	// SubjectPrefix is the cluster's subject prefix on the bus (--subject-prefix).
	SubjectPrefix string
	// WindowRevisions and WindowBytes bound the recent revisions kept in memory for watchers that start in the
	// past or fall behind; older revisions are read from storage (--window-revisions, --window-bytes).
	WindowRevisions int
	WindowBytes     int
	// ProgressNotifyInterval is how often watchers that asked for progress_notify get one when idle
	// (--watch-progress-notify-interval); never below MinProgressNotifyInterval.
	ProgressNotifyInterval time.Duration
	// MaxRequestBytes is etcd's --max-request-bytes: responses of watchers that asked for fragment are cut into
	// fragments of MaxRequestBytes plus gRPC overhead (512 KiB), as etcd cuts them.
	MaxRequestBytes int
	// WatcherBufferResponses is how many responses one watcher may have waiting to be written before it falls
	// behind into catch-up (--watcher-buffer-responses).
	WatcherBufferResponses int
	// StreamBufferBytes bounds the bytes waiting to be written on one stream; past it, watchers fall behind
	// (--stream-buffer-bytes).
	StreamBufferBytes int
	// MaxWatchLag bounds how far behind the head a watcher may fall: one whose oldest undelivered revision
	// reached the hub (or, if later, whose watch was created) more than MaxWatchLag ago is canceled with a
	// reason instead of being served late (lag.go; --max-watch-lag).
	MaxWatchLag time.Duration
	// StoragePollInterval is how often the hub asks storage for its revision, to notice a tail the bus did not
	// deliver (--storage-poll-interval).
	StoragePollInterval time.Duration
	// StorageTimeout bounds one storage call (--storage-timeout).
	StorageTimeout time.Duration
	// HistoryPageSize is the events per History page asked of storage.
	HistoryPageSize int
	// AdminAddr is host:port for /metrics and /health of this hub alone; empty serves none (in-process users;
	// `cairn watchhub` serves them on --listen-metrics-urls, as every service does).
	AdminAddr string
	// SecretConfig gives the relay secret, what the frontends send to prove they are (package relayauth): with
	// authentication enabled, a plain hub serves only callers that send it.
	relayauth.SecretConfig
}

// Deps are what a hub takes from the process that runs it: where it reports, and the listener the caller
// bound.
type Deps struct {
	// Logger and Telemetry are where the hub reports; nil: slog.Default and no tracing.
	Logger    *slog.Logger
	Telemetry *obs.Telemetry
	// Registry receives the hub's metrics; nil: a registry of its own (with the Go runtime's), served on
	// AdminAddr and returned by Hub.Registry.
	Registry *prometheus.Registry
	// Listener, when set, is served instead of listening on Config.ListenURL; the hub closes it when it stops.
	Listener net.Listener
	// Keyring opens the sealed values of the bus records (see seal.go); it must be the storages' configuration.
	// nil: values on the bus are plain. The caller owns it.
	Keyring *seal.Keyring
	// Internal, when set, makes every link this service serves and dials mutual TLS (--internal-* flags); nil:
	// plain.
	Internal *tlsconfig.Link
}

// withDefaults fills what is nil: no telemetry, and slog's default logger.
func (d Deps) withDefaults() Deps {
	d.Telemetry, d.Logger = obs.ServiceDefaults(d.Telemetry, d.Logger)
	return d
}

// DefaultConfig returns the defaults, for flags.
func DefaultConfig() Config { return Config{}.WithDefaults() }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.ListenURL == "" {
		c.ListenURL = DefaultListenURL
	}
	if len(c.StorageEndpoints) == 0 {
		c.StorageEndpoints = []string{DefaultStorageEndpoint}
	}
	if c.NATSURL == "" {
		c.NATSURL = DefaultNATSURL
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = eventbus.DefaultSubjectPrefix
	}
	config.SetDefault(&c.WindowRevisions, DefaultWindowRevisions)
	config.SetDefault(&c.WindowBytes, DefaultWindowBytes)
	config.SetDefault(&c.MaxRequestBytes, DefaultMaxRequestBytes)
	config.SetDefault(&c.WatcherBufferResponses, DefaultWatcherBufferResponses)
	config.SetDefault(&c.StreamBufferBytes, DefaultStreamBufferBytes)
	config.SetDefault(&c.HistoryPageSize, DefaultHistoryPageSize)
	config.SetDefault(&c.ProgressNotifyInterval, DefaultProgressNotifyInterval)
	config.SetDefault(&c.StoragePollInterval, DefaultStoragePollInterval)
	config.SetDefault(&c.MaxWatchLag, DefaultMaxWatchLag)
	config.SetDefault(&c.StorageTimeout, DefaultStorageTimeout)
	if c.ProgressNotifyInterval < MinProgressNotifyInterval {
		c.ProgressNotifyInterval = MinProgressNotifyInterval // as etcd adjusts it
	}
	return c
}

// RegisterFlags binds the configuration to flags on fs; the current values are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ListenURL, "listen-url", c.ListenURL, "URL to serve the etcd Watch API on (http://host:port).")
	fs.Var((*config.URLList)(&c.StorageEndpoints), "storage-endpoints", "Comma-separated storage URLs to read history and status from.")
	fs.StringVar(&c.NATSURL, "nats-url", c.NATSURL, "NATS URL of the event bus (comma-separated for a cluster).")
	fs.StringVar(&c.NATSNkeySeedFile, "nats-nkey-seed-file", c.NATSNkeySeedFile, "File holding this process's nkey seed, its credentials on a bus locked down with role nkeys (cairn up keeps them in DATA-DIR/nats); empty: none.")
	fs.StringVar(&c.SubjectPrefix, "subject-prefix", c.SubjectPrefix, "Subject prefix of the cluster's records on the bus.")
	fs.IntVar(&c.WindowRevisions, "window-revisions", c.WindowRevisions, "Recent revisions kept in memory.")
	fs.IntVar(&c.WindowBytes, "window-bytes", c.WindowBytes, "Bytes of recent revisions kept in memory.")
	fs.DurationVar(&c.ProgressNotifyInterval, "watch-progress-notify-interval", c.ProgressNotifyInterval, "Duration of periodic watch progress notifications.")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "etcd's --max-request-bytes; fragmented watch responses are cut at this plus 512 KiB.")
	fs.IntVar(&c.WatcherBufferResponses, "watcher-buffer-responses", c.WatcherBufferResponses, "Responses one watcher may have unwritten before it falls behind into catch-up.")
	fs.IntVar(&c.StreamBufferBytes, "stream-buffer-bytes", c.StreamBufferBytes, "Bytes one stream may have unwritten before its watchers fall behind into catch-up.")
	fs.DurationVar(&c.MaxWatchLag, "max-watch-lag", c.MaxWatchLag, "How far behind the head a watcher may fall (age of its oldest undelivered revision at the hub) before it is canceled with a reason, so that its client re-watches.")
	fs.DurationVar(&c.StoragePollInterval, "storage-poll-interval", c.StoragePollInterval, "How often storage's revision is checked for records the bus did not deliver.")
	fs.DurationVar(&c.StorageTimeout, "storage-timeout", c.StorageTimeout, "Timeout of one storage call.")
	c.SecretConfig.RegisterFlags(fs, "Secret the frontends send: with auth enabled and no --internal-* TLS, only callers sending it are served.")
}

// Validate reports every unusable setting, one config.FieldError each (named by its flag).
func (c Config) Validate() error {
	var errs []error
	if _, err := config.HostPort(c.ListenURL); err != nil {
		errs = append(errs, config.Invalid("--listen-url", "%w", err))
	}
	if len(c.StorageEndpoints) == 0 {
		errs = append(errs, config.Invalid("--storage-endpoints", "--storage-endpoints must name at least one storage"))
	}
	for _, e := range c.StorageEndpoints {
		if _, err := config.HostPort(e); err != nil {
			errs = append(errs, config.Invalid("--storage-endpoints", "%w", err))
		}
	}
	if c.NATSURL == "" {
		errs = append(errs, config.Invalid("--nats-url", "--nats-url must not be empty"))
	}
	for _, n := range []struct {
		flag  string
		value int
	}{{"--window-revisions", c.WindowRevisions}, {"--window-bytes", c.WindowBytes},
		{"--max-request-bytes", c.MaxRequestBytes}, {"--watcher-buffer-responses", c.WatcherBufferResponses},
		{"--stream-buffer-bytes", c.StreamBufferBytes}, {"HistoryPageSize", c.HistoryPageSize}} {
		if n.value <= 0 {
			errs = append(errs, config.Invalid(n.flag, "%s %d must be positive", n.flag, n.value))
		}
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{{"--watch-progress-notify-interval", c.ProgressNotifyInterval},
		{"--storage-poll-interval", c.StoragePollInterval}, {"--storage-timeout", c.StorageTimeout},
		{"--max-watch-lag", c.MaxWatchLag}} {
		if d.value <= 0 {
			errs = append(errs, config.Invalid(d.flag, "%s %v must be positive", d.flag, d.value))
		}
	}
	return errors.Join(errs...)
}

// fragmentBytes is the response size at which fragmented responses are cut (etcd's
// MaxRequestBytesWithOverhead).
func (c Config) fragmentBytes() int { return c.MaxRequestBytes + grpcOverheadBytes }
