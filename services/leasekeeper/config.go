package leasekeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// Defaults. Rates and the checkpoint batch are etcd's; the timings suit a Raft election timeout of 1s.
const (
	DefaultListenURL          = "http://127.0.0.1:2395"
	DefaultNATSURL            = "nats://127.0.0.1:4222"
	DefaultCheckpointInterval = time.Second
	DefaultRevokeRate         = 1000 // etcd's leaseRevokeRate, leases per second
	DefaultCheckpointRate     = 1000 // etcd's leaseCheckpointRate, checkpoint entries per second
	DefaultCheckpointBatch    = 1000 // etcd's maxLeaseCheckpointBatchSize
	DefaultRenewInterval      = 200 * time.Millisecond
	DefaultTakeoverTimeout    = 1500 * time.Millisecond
	DefaultDeadlineExtension  = time.Second // etcd extends by its election timeout (1s by default) on promotion
	DefaultReconcileInterval  = 10 * time.Second
	DefaultRequestTimeout     = 7 * time.Second // storage's
	DefaultExpiryTick         = 100 * time.Millisecond
	DefaultRevokeRetry        = 3 * time.Second // etcd's expiredLeaseRetryInterval
)

// Config configures one leasekeeper. Zero fields take the defaults (WithDefaults); Validate reports what is
// unusable.
type Config struct {
	// Name names the keeper in logs and in its claim (a random suffix makes every start a new claimant).
	Name string
	// ListenURL is where the etcd Lease gRPC service is served, http://host:port (port 0 picks one).
	ListenURL string
	// StorageEndpoints are storage gRPC URLs; calls go to the first that answers and fail over to the next.
	StorageEndpoints []string
	// NATSURL is the event bus (comma-separated for a NATS cluster); SubjectPrefix the cluster's subjects.
	NATSURL       string
	SubjectPrefix string
	// NATSNkeySeedFile holds the keeper's nkey seed on a bus locked down with role nkeys
	// (--nats-nkey-seed-file).
	NATSNkeySeedFile string
	// CheckpointInterval is how long after a renewal a lease's remaining TTL is checkpointed (etcd:
	// --lease-checkpoint-interval). A failover may keep a lease that was not renewed for up to about this much
	// longer than its TTL; each lease renewed less often than this costs two checkpoint items per renewal
	// (checkpoint and reset), batched CheckpointBatch to an entry.
	CheckpointInterval time.Duration
	// CheckpointRate bounds checkpoint entries per second; CheckpointBatch the checkpoints in one entry.
	CheckpointRate  int
	CheckpointBatch int
	// RevokeRate bounds the revokes of expired leases per second (etcd's leaseRevokeRate).
	RevokeRate int
	// PeerURLs are every leasekeeper's ListenURL (this one's may be among them). With them the claim is held
	// without log writes: the active keeper confirms it with a linearizable read every RenewInterval, and a
	// standby asks the peers whether the holder is alive (gRPC health, service name the holder's ID) and
	// claims after TakeoverTimeout without a live answer, or at once when no peer is the holder it saw alive. Without them the active keeper renews its claim
	// through the log every RenewInterval, and a standby takes over after TakeoverTimeout without a renewal.
	PeerURLs []string
	// RenewInterval is how often the active keeper renews (or confirms) its claim and a standby looks at it.
	RenewInterval time.Duration
	// TakeoverTimeout is how long a standby waits without seeing a renewal before it claims the role. The active
	// keeper stops serving when its last successful renewal is older than ActiveTimeout (default two thirds of
	// TakeoverTimeout), so it has stopped before any standby takes over. A keeper that has just started waits
	// twice TakeoverTimeout on the first claim it reads, so a standby that was already watching wins the race.
	TakeoverTimeout time.Duration
	ActiveTimeout   time.Duration
	// DeadlineExtension is added to every lease's deadline by a new active keeper (etcd: the election timeout).
	DeadlineExtension time.Duration
	// ReconcileInterval is how often the lease table is compared with storage's records (the bus is lossy).
	ReconcileInterval time.Duration
	// RequestTimeout bounds one storage call.
	RequestTimeout time.Duration
	// ExpiryTick is how often deadlines are checked; RevokeRetry how long before an unanswered revoke is retried.
	ExpiryTick  time.Duration
	RevokeRetry time.Duration
	// AdminAddr is host:port for /metrics and /health of this keeper alone; empty serves none (`cairn
	// leasekeeper` serves them on its --listen-metrics-urls, with Deps.Registry).
	AdminAddr string
	// SecretConfig gives the relay secret, what the frontends send to prove they are (package relayauth): with
	// authentication enabled, a plain keeper serves only callers that send it.
	relayauth.SecretConfig
}

// Deps are what a keeper takes from the process that runs it: where it reports, and the listener the caller
// bound.
type Deps struct {
	// Logger and Telemetry are where the keeper reports; nil: slog.Default and no tracing.
	Logger    *slog.Logger
	Telemetry *obs.Telemetry
	// Registry, when set, also gets the keeper's metrics (a process serving several services' metrics).
	Registry prometheus.Registerer
	// Listener, when set, is served instead of listening on Config.ListenURL; the keeper closes it when it
	// stops.
	Listener net.Listener
	// Dialer, when set, makes the keeper's connections to storage and NATS (addr is host:port) instead of TCP:
	// tests run keepers on an in-memory network (internal/testing/memnet) inside a synctest bubble.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
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
	config.SetDefault(&c.Name, "leasekeeper")
	config.SetDefault(&c.ListenURL, DefaultListenURL)
	config.SetDefault(&c.NATSURL, DefaultNATSURL)
	config.SetDefault(&c.SubjectPrefix, eventbus.DefaultSubjectPrefix)
	config.SetDefault(&c.CheckpointInterval, DefaultCheckpointInterval)
	config.SetDefault(&c.CheckpointRate, DefaultCheckpointRate)
	config.SetDefault(&c.CheckpointBatch, DefaultCheckpointBatch)
	config.SetDefault(&c.RevokeRate, DefaultRevokeRate)
	config.SetDefault(&c.RenewInterval, DefaultRenewInterval)
	config.SetDefault(&c.TakeoverTimeout, DefaultTakeoverTimeout)
	config.SetDefault(&c.ActiveTimeout, c.TakeoverTimeout*2/3)
	config.SetDefault(&c.DeadlineExtension, DefaultDeadlineExtension)
	config.SetDefault(&c.ReconcileInterval, DefaultReconcileInterval)
	config.SetDefault(&c.RequestTimeout, DefaultRequestTimeout)
	config.SetDefault(&c.ExpiryTick, DefaultExpiryTick)
	config.SetDefault(&c.RevokeRetry, DefaultRevokeRetry)
	return c
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
	for _, e := range c.PeerURLs {
		if _, err := config.HostPort(e); err != nil {
			errs = append(errs, config.Invalid("--peer-urls", "%w", err))
		}
	}
	if c.NATSURL == "" {
		errs = append(errs, config.Invalid("--nats-url", "--nats-url must not be empty"))
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{{"--checkpoint-interval", c.CheckpointInterval}, {"--renew-interval", c.RenewInterval},
		{"--takeover-timeout", c.TakeoverTimeout}, {"--active-timeout", c.ActiveTimeout},
		{"--deadline-extension", c.DeadlineExtension}, {"--reconcile-interval", c.ReconcileInterval},
		{"--request-timeout", c.RequestTimeout}, {"--expiry-tick", c.ExpiryTick}, {"--revoke-retry", c.RevokeRetry}} {
		if d.value <= 0 {
			errs = append(errs, config.Invalid(d.flag, "%s %v must be positive", d.flag, d.value))
		}
	}
	for _, n := range []struct {
		flag  string
		value int
	}{{"--revoke-rate", c.RevokeRate}, {"--checkpoint-rate", c.CheckpointRate}, {"--checkpoint-batch", c.CheckpointBatch}} {
		if n.value <= 0 {
			errs = append(errs, config.Invalid(n.flag, "%s %d must be positive", n.flag, n.value))
		}
	}
	if c.ActiveTimeout+c.RenewInterval > c.TakeoverTimeout {
		errs = append(errs, config.Invalid("--active-timeout", "--active-timeout %v plus --renew-interval %v must not exceed --takeover-timeout %v: "+
			"the active keeper must stop serving before a standby takes over", c.ActiveTimeout, c.RenewInterval, c.TakeoverTimeout))
	}
	if c.RenewInterval >= c.ActiveTimeout {
		errs = append(errs, config.Invalid("--renew-interval", "--renew-interval %v must be shorter than --active-timeout %v", c.RenewInterval, c.ActiveTimeout))
	}
	return errors.Join(errs...)
}

// RegisterFlags binds the configuration to flags on fs; the current values are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, "name", c.Name, "Name of this leasekeeper, for logs and its claim.")
	fs.StringVar(&c.ListenURL, "listen-url", c.ListenURL, "URL to serve the etcd Lease gRPC service on.")
	fs.Var((*config.URLList)(&c.StorageEndpoints), "storage-endpoints", "Comma-separated storage URLs (fail over in order).")
	fs.StringVar(&c.NATSURL, "nats-url", c.NATSURL, "NATS URL of the event bus.")
	fs.StringVar(&c.NATSNkeySeedFile, "nats-nkey-seed-file", c.NATSNkeySeedFile, "File holding this process's nkey seed, its credentials on a bus locked down with role nkeys (cairn up keeps them in DATA-DIR/nats); empty: none.")
	fs.StringVar(&c.SubjectPrefix, "subject-prefix", c.SubjectPrefix, "Event bus subject prefix of the cluster.")
	fs.DurationVar(&c.CheckpointInterval, "checkpoint-interval", c.CheckpointInterval, "Time after a renewal at which a lease's remaining TTL is checkpointed through the log.")
	fs.IntVar(&c.CheckpointRate, "checkpoint-rate", c.CheckpointRate, "Maximum checkpoint entries per second.")
	fs.IntVar(&c.CheckpointBatch, "checkpoint-batch", c.CheckpointBatch, "Maximum lease checkpoints in one entry.")
	fs.IntVar(&c.RevokeRate, "revoke-rate", c.RevokeRate, "Maximum revokes of expired leases per second.")
	fs.Var((*config.URLList)(&c.PeerURLs), "peer-urls", "Comma-separated --listen-url of every leasekeeper: the claim is then held without log writes (the standbys ask these whether the holder is alive); empty: renewed through the log.")
	fs.DurationVar(&c.RenewInterval, "renew-interval", c.RenewInterval, "Interval of claim renewals (active) and claim checks (standby).")
	fs.DurationVar(&c.TakeoverTimeout, "takeover-timeout", c.TakeoverTimeout, "Time without a renewal after which a standby takes over (twice that for a keeper just started; with --peer-urls, a standby claims at once when no peer is the holder it saw alive).")
	fs.DurationVar(&c.ActiveTimeout, "active-timeout", c.ActiveTimeout, "Age of its last renewal at which the active keeper stops serving.")
	fs.DurationVar(&c.DeadlineExtension, "deadline-extension", c.DeadlineExtension, "Least time every lease has left after a takeover (etcd: the election timeout).")
	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", c.ReconcileInterval, "Interval of lease table reconciliation with storage.")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "Timeout of one storage call.")
	c.SecretConfig.RegisterFlags(fs, "Secret the frontends send: with auth enabled and no --internal-* TLS, only callers sending it are served.")
}

// keeperID is the name plus a random suffix: each start is a new claimant.
func keeperID(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}
