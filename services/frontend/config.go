package frontend

import (
	"errors"
	"flag"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/cairn-kv/cairn/internal/authtoken"
	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/etcdcheck"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// Defaults, etcd's where etcd has the setting.
const (
	DefaultListenClientURL = "http://127.0.0.1:2379"
	// DefaultRequestTimeout is etcd's client-facing request timeout with its default election timeout:
	// 5s + 2 × 1000 ms.
	DefaultRequestTimeout = 7 * time.Second
	// DefaultProbeInterval is how often every storage and consensus replica is asked for its status.
	DefaultProbeInterval = 500 * time.Millisecond
	// DefaultConnsPerStorage is how many gRPC connections the frontend keeps open to each storage.
	DefaultConnsPerStorage = 2
)

// grpcOverheadBytes is etcd's allowance over --max-request-bytes for gRPC framing: the server's
// MaxRecvMsgSize is max-request-bytes + 512 KiB, so a slightly oversized request reaches etcdcheck and gets
// etcd's "request is too large" instead of gRPC's own error.
const grpcOverheadBytes = 512 * 1024

// Config configures a frontend. Flag names and defaults are etcd's where etcd has the setting.
type Config struct {
	// Name is the frontend's name (--name). When a member has the same name, that member is this
	// frontend's home member: Status, Hash, HashKV and Snapshot describe it, as an etcd endpoint describes itself.
	Name string
	// ListenClientURLs are where the etcd API (gRPC and the JSON gateway on one port) is served
	// (--listen-client-urls); port 0 picks a free port (see ClientURLs).
	ListenClientURLs []string
	// AdvertiseClientURLs are the URLs clients reach this frontend at (--advertise-client-urls).
	AdvertiseClientURLs []string
	// ListenMetricsURLs serve /metrics, /health, /readyz and /livez on their own listeners
	// (--listen-metrics-urls); the client URLs serve them too.
	ListenMetricsURLs []string
	// ConsensusEndpoints are consensus API URLs (http://host:port) (--consensus-endpoints).
	ConsensusEndpoints []string
	// StorageEndpoints are storage API URLs (--storage-endpoints); optional, since every member's storage
	// URL is also discovered from consensus membership.
	StorageEndpoints []string
	// WatchEndpoints are watchhubs serving etcdserverpb.Watch (--watch-endpoints); none: Watch is
	// codes.Unimplemented.
	WatchEndpoints []string
	// LeaseEndpoints are leasekeepers serving etcdserverpb.Lease (--lease-endpoints); none: Lease is
	// codes.Unimplemented.
	LeaseEndpoints []string
	// MaxRequestBytes is etcd's --max-request-bytes (1.5 MiB).
	MaxRequestBytes uint
	// MaxTxnOps is etcd's --max-txn-ops (128).
	MaxTxnOps uint
	// RequestTimeout bounds one client request across every replica it is tried on (--request-timeout).
	RequestTimeout time.Duration
	// ProbeInterval is how often replicas are asked for their status (--probe-interval).
	ProbeInterval time.Duration
	// ConnsPerStorage is how many gRPC connections are kept to each storage (--conns-per-storage).
	ConnsPerStorage int
	// LogLevel is etcd's --log-level (debug, info, warn, error).
	LogLevel string
	// EnablePprof serves /debug/pprof on the client and metrics URLs, as etcd's --enable-pprof does.
	EnablePprof bool
	// TLS serves the https:// client URLs (--cert-file, --key-file, --trusted-ca-file, --client-cert-auth).
	// With ClientCertAuth and authentication enabled, a request without a token is the user named by its
	// certificate's common name, as in etcd.
	TLS tlsconfig.Files
	// TLSPolicy bounds the TLS versions and cipher suites of the https:// client URLs (--tls-min-version,
	// --tls-max-version, --cipher-suites, registered by the process).
	TLSPolicy tlsconfig.Policy
	// AuthToken is etcd's --auth-token: "simple" or "jwt,pub-key=FILE,priv-key=FILE,sign-method=METHOD[,ttl=D]"
	// (package authtoken).
	AuthToken string
	// AuthTokenTTL is etcd's --auth-token-ttl: a simple token's life after its last use, in seconds.
	AuthTokenTTL uint
	// BcryptCost is etcd's --bcrypt-cost for hashing passwords (4 to 31).
	BcryptCost int
	// SecretConfig gives the relay secret, sent on every call relayed to a watchhub or leasekeeper to prove it
	// comes from a frontend (package relayauth; the hubs' and keepers' own).
	relayauth.SecretConfig
}

// Deps are what a frontend takes from the process that runs it: where it reports, and the listeners the
// caller bound (a test cluster and `cairn dev` bind 127.0.0.1:0 first and pass them).
type Deps struct {
	// Logger and Telemetry are where the frontend reports; nil: slog.Default and no tracing.
	Logger    *slog.Logger
	Telemetry *obs.Telemetry
	// Registry receives the frontend's metrics and is what its /metrics serves; nil: a registry of its own.
	// A process that runs several services passes the one registry they all report to, so /metrics shows
	// every service's series.
	Registry *prometheus.Registry
	// ClientListeners, when set, are served instead of listening on Config.ListenClientURLs (one per URL, in
	// order, TLS where the URL is https); MetricsListeners likewise for Config.ListenMetricsURLs. The
	// frontend closes them when it stops.
	ClientListeners  []net.Listener
	MetricsListeners []net.Listener
	// Internal, when set, makes every link to storages, consensus members, watchhubs and leasekeepers mutual TLS (--internal-* flags); nil:
	// plain.
	Internal *tlsconfig.Link
}

// withDefaults fills what is nil: no telemetry, and slog's default logger.
func (d Deps) withDefaults() Deps {
	d.Telemetry, d.Logger = obs.ServiceDefaults(d.Telemetry, d.Logger)
	return d
}

// DefaultConfig returns etcd's defaults (and Cairn's for settings etcd lacks).
func DefaultConfig() Config {
	return Config{
		Name:             "default",
		ListenClientURLs: []string{DefaultListenClientURL},
		MaxRequestBytes:  etcdcheck.DefaultMaxRequestBytes,
		MaxTxnOps:        etcdcheck.DefaultMaxTxnOps,
		RequestTimeout:   DefaultRequestTimeout,
		ProbeInterval:    DefaultProbeInterval,
		ConnsPerStorage:  DefaultConnsPerStorage,
		LogLevel:         "info",
		AuthToken:        "simple",
		AuthTokenTTL:     uint(authtoken.DefaultSimpleTTL / time.Second),
		BcryptCost:       bcrypt.DefaultCost,
	}
}

// RegisterFlags binds the configuration to etcd-named flags on fs; the current values are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, "name", c.Name, "Name of this frontend; a member of the same name is its home member (Status, Hash, HashKV, Snapshot).")
	fs.Var((*config.URLList)(&c.ListenClientURLs), "listen-client-urls", "List of URLs to listen on for client traffic (gRPC and HTTP).")
	fs.Var((*config.URLList)(&c.AdvertiseClientURLs), "advertise-client-urls", "List of this frontend's client URLs to advertise to the public.")
	fs.Var((*config.URLList)(&c.ListenMetricsURLs), "listen-metrics-urls", "List of URLs to listen on for /metrics and the health endpoints.")
	fs.Var((*config.URLList)(&c.ConsensusEndpoints), "consensus-endpoints", "Comma-separated consensus API URLs (http://host:port).")
	fs.Var((*config.URLList)(&c.StorageEndpoints), "storage-endpoints", "Comma-separated storage API URLs; optional, they are discovered from consensus membership.")
	fs.Var((*config.URLList)(&c.WatchEndpoints), "watch-endpoints", "Comma-separated watchhub URLs serving the etcd Watch service.")
	fs.Var((*config.URLList)(&c.LeaseEndpoints), "lease-endpoints", "Comma-separated leasekeeper URLs serving the etcd Lease service.")
	fs.UintVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "Maximum client request size in bytes the server will accept.")
	fs.UintVar(&c.MaxTxnOps, "max-txn-ops", c.MaxTxnOps, "Maximum number of operations permitted in a transaction.")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "Bound on one client request, retries included.")
	fs.DurationVar(&c.ProbeInterval, "probe-interval", c.ProbeInterval, "How often storage and consensus replicas are health-checked (up to 4 times less often while nothing changes).")
	fs.IntVar(&c.ConnsPerStorage, "conns-per-storage", c.ConnsPerStorage, "gRPC connections kept open to each storage.")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "Log level: debug, info, warn or error.")
	fs.BoolVar(&c.EnablePprof, "enable-pprof", c.EnablePprof, "Enable runtime profiling data via HTTP server at the client and metrics URLs + \"/debug/pprof/\".")
	c.TLS.RegisterFlags(fs)
	fs.StringVar(&c.AuthToken, "auth-token", c.AuthToken, "Specify auth token specific options (simple, or jwt,pub-key=...,priv-key=...,sign-method=...).")
	fs.UintVar(&c.AuthTokenTTL, "auth-token-ttl", c.AuthTokenTTL, "The lifetime in seconds of the auth token.")
	fs.IntVar(&c.BcryptCost, "bcrypt-cost", c.BcryptCost, "Specify bcrypt algorithm cost factor for auth password hashing.")
	c.SecretConfig.RegisterFlags(fs, "Secret sent to the watchhubs and leasekeepers to prove calls come from a frontend (their --relay-secret).")
}

// Validate reports every unusable setting.
func (c Config) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, config.Invalid("--name", "--name must not be empty"))
	}
	if len(c.ListenClientURLs) == 0 {
		errs = append(errs, config.Invalid("--listen-client-urls", "--listen-client-urls must not be empty"))
	}
	for _, u := range c.ListenClientURLs {
		err := config.CheckEtcdURL(u)
		_, secure, hostErr := config.ClientHostPort(u)
		if err == nil {
			err = hostErr
		}
		if err == nil {
			err = c.TLS.CheckURL(u, secure)
		}
		if err != nil {
			errs = append(errs, config.Invalid("--listen-client-urls", "%w", err))
		}
	}
	for _, u := range c.AdvertiseClientURLs {
		if err := config.CheckEtcdURL(u); err != nil {
			errs = append(errs, config.Invalid("--advertise-client-urls", "%w", err))
		}
	}
	for _, u := range c.ListenMetricsURLs {
		if err := config.CheckEtcdURL(u); err != nil {
			errs = append(errs, config.Invalid("--listen-metrics-urls", "%w", err))
		}
	}
	for flagName, urls := range map[string][]string{
		"--listen-metrics-urls": c.ListenMetricsURLs, "--consensus-endpoints": c.ConsensusEndpoints,
		"--storage-endpoints": c.StorageEndpoints, "--watch-endpoints": c.WatchEndpoints,
		"--lease-endpoints": c.LeaseEndpoints,
	} {
		for _, u := range urls {
			if _, err := config.HostPort(u); err != nil {
				errs = append(errs, config.Invalid(flagName, "%w", err))
			}
		}
	}
	if len(c.ConsensusEndpoints) == 0 && len(c.StorageEndpoints) == 0 {
		errs = append(errs, config.Invalid("--consensus-endpoints", "--consensus-endpoints (or at least --storage-endpoints) must be given"))
	}
	if c.MaxRequestBytes == 0 {
		errs = append(errs, config.Invalid("--max-request-bytes", "--max-request-bytes must be positive"))
	}
	if c.MaxTxnOps == 0 {
		errs = append(errs, config.Invalid("--max-txn-ops", "--max-txn-ops must be positive"))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, config.Invalid("--request-timeout", "--request-timeout must be positive"))
	}
	if c.ProbeInterval <= 0 {
		errs = append(errs, config.Invalid("--probe-interval", "--probe-interval must be positive"))
	}
	if c.ConnsPerStorage <= 0 {
		errs = append(errs, config.Invalid("--conns-per-storage", "--conns-per-storage must be positive"))
	}
	if c.BcryptCost < bcrypt.MinCost || c.BcryptCost > bcrypt.MaxCost {
		errs = append(errs, config.Invalid("--bcrypt-cost", "--bcrypt-cost must be between %d and %d", bcrypt.MinCost, bcrypt.MaxCost))
	}
	if _, err := authtoken.New(c.AuthToken, time.Second, time.Now); err != nil {
		errs = append(errs, config.Invalid("--auth-token", "%w", err))
	}
	if _, err := obs.ParseLevel(c.LogLevel); err != nil {
		errs = append(errs, config.Invalid("--log-level", "%w", err))
	}
	return errors.Join(errs...)
}

func (c Config) limits() etcdcheck.Limits {
	return etcdcheck.Limits{MaxTxnOps: int(c.MaxTxnOps), MaxRequestBytes: int(c.MaxRequestBytes)}
}

// storageCallBound is the longest the frontend waits for a storage's answer: a little longer than storage's own
// request timeout, so that storage's answer (etcd's "request timed out") comes first.
func (c Config) storageCallBound() time.Duration { return c.RequestTimeout + c.ProbeInterval }
