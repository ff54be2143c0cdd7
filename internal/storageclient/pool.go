package storageclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// PoolConfig configures a Pool.
type PoolConfig struct {
	// Endpoints are the storages' URLs, in order of preference.
	Endpoints []string
	// DialOptions are added to every storage's connection (telemetry).
	DialOptions []grpc.DialOption
	// CallTimeout bounds each try of a call on one storage; 0: only the caller's context bounds it.
	CallTimeout time.Duration
	// FailsOver decides whether a call that failed with err is tried on the next storage; nil:
	// FailsOverUnavailable.
	FailsOver func(ctx context.Context, err error) bool
	// Logger reports a change of the preferred storage; nil discards.
	Logger *slog.Logger
	// TLS secures every storage's connection (the internal link); nil: plain.
	TLS *tlsconfig.Link
}

// Pool is a set of storages a service reads from and writes through: a call goes to the preferred storage
// and, while it fails in a way FailsOver accepts, on to the next in turn; the storage that answered becomes
// the preferred one. The leasekeeper and the watchhub use it.
type Pool struct {
	cfg     PoolConfig
	clients []*Client

	mu        sync.Mutex
	preferred int
}

// ErrNoEndpoints is returned by NewPool when no storage is named.
var ErrNoEndpoints = errors.New("storage pool: no endpoints")

// NewPool dials every endpoint (connections are made in the background).
func NewPool(cfg PoolConfig) (*Pool, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, ErrNoEndpoints
	}
	if cfg.FailsOver == nil {
		cfg.FailsOver = FailsOverUnavailable
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Pool{cfg: cfg}
	for _, e := range cfg.Endpoints {
		c, err := Dial(e, append(cfg.DialOptions, cfg.TLS.DialOption())...)
		if err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("storage endpoint %s: %w", e, err)
		}
		p.clients = append(p.clients, c)
	}
	return p, nil
}

// FailsOverUnavailable fails over when the storage could not serve the call at all (codes.Unavailable) and
// the caller has not given up.
func FailsOverUnavailable(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return false
	}
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unavailable
}

// Close closes every connection.
func (p *Pool) Close() error {
	var errs []error
	for _, c := range p.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Endpoint is the URL of the storage at index i (as in PoolConfig.Endpoints).
func (p *Pool) Endpoint(i int) string { return p.cfg.Endpoints[i] }

// Preferred is the index of the storage calls go to first.
func (p *Pool) Preferred() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.preferred
}

// Prefer makes the storage at index i the one calls go to first.
func (p *Pool) Prefer(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.preferred != i {
		p.cfg.Logger.Info("storage endpoint failed over", "endpoint", p.cfg.Endpoints[i],
			"previous", p.cfg.Endpoints[p.preferred])
		p.preferred = i
	}
}

// Do calls f with each storage in turn, from the preferred one, until f succeeds or fails in a way that does
// not fail over; f must be safe to repeat on another storage. It returns f's last error as it is.
func (p *Pool) Do(ctx context.Context, f func(ctx context.Context, c *Client) error) error {
	first := p.Preferred()
	var err error
	for i := range p.clients {
		n := (first + i) % len(p.clients)
		err = p.try(ctx, n, f)
		if err == nil {
			p.Prefer(n)
			return nil
		}
		if !p.cfg.FailsOver(ctx, err) {
			return err
		}
	}
	return err // every storage failed over: the last one's error
}

func (p *Pool) try(ctx context.Context, n int, f func(ctx context.Context, c *Client) error) error {
	if p.cfg.CallTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.CallTimeout)
		defer cancel()
	}
	return f(ctx, p.clients[n])
}

// EndpointStatus is one storage's answer to Status.
type EndpointStatus struct {
	Endpoint string
	Index    int
	Status   *storagepb.StatusResponse
}

// Statuses asks every storage for its status at once; it returns those that answered, in endpoint order,
// and the errors of the others.
func (p *Pool) Statuses(ctx context.Context) ([]EndpointStatus, error) {
	results := make([]*storagepb.StatusResponse, len(p.clients))
	errs := make([]error, len(p.clients))
	var wg sync.WaitGroup
	for i := range p.clients {
		wg.Go(func() {
			errs[i] = p.try(ctx, i, func(ctx context.Context, c *Client) error {
				st, err := c.Status(ctx)
				if err != nil {
					return fmt.Errorf("status of storage %s: %w", p.cfg.Endpoints[i], err)
				}
				results[i] = st
				return nil
			})
		})
	}
	wg.Wait()
	var answered []EndpointStatus
	for i, st := range results {
		if st != nil {
			answered = append(answered, EndpointStatus{Endpoint: p.cfg.Endpoints[i], Index: i, Status: st})
		}
	}
	return answered, errors.Join(errs...)
}
