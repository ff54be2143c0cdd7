package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/connectivity"

	"github.com/cairn-kv/cairn/internal/tools/progress"
)

// Op issues one benchmark request through client. seq numbers the requests of one Run from 0 upwards, each
// exactly once; ops use it for sequential keys. An Op must honour ctx.
type Op func(ctx context.Context, client *clientv3.Client, seq int64) error

// RunnerConfig configures a Runner; the flag names of `cairn bench` are given in brackets.
type RunnerConfig struct {
	// Endpoints are the servers' client URLs or host:port [--endpoints]. Connection i dials endpoint
	// i mod len(Endpoints), as etcd's tool does, so connections spread over the members.
	Endpoints []string
	// TargetLeader replaces Endpoints, when Start connects, by the client URLs of the raft leader, found as
	// etcd's tool finds it: the leader ID from the first endpoint that answers Status, its URLs from MemberList
	// [--target-leader]. etcd's performance documentation runs its put rows so.
	TargetLeader bool
	// Conns is the number of gRPC connections [--conns]. Default 1.
	Conns int
	// Clients is the number of concurrent workers sharing the connections round-robin [--clients]. Default 1.
	Clients int
	// Total bounds the number of requests per Run [--total]; 0 means no count bound.
	Total int64
	// Duration bounds the time requests are issued per Run [--duration]; 0 means no time bound.
	// At least one of Total and Duration must be set.
	Duration time.Duration
	// Rate caps requests per second over all clients [--rate]; 0 means unlimited.
	Rate float64
	// TLS, if set, secures every connection (https endpoints) [--cacert, --cert, --key].
	TLS *tls.Config
	// Username and Password, if set, authenticate every connection [--user USER:PASSWORD].
	Username, Password string
	// DialTimeout bounds connection setup [--dial-timeout]. Default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds each request [--request-timeout]; a request that runs out counts as an error.
	// clientv3 retries an unreachable server indefinitely, so without it a dead target would stall a run.
	// Default 30s.
	RequestTimeout time.Duration
	// Progress, if set, receives a progress bar while Run works (the CLI passes stderr).
	Progress io.Writer
	// LazyConnect skips Start's check that every connection reaches its endpoint within DialTimeout (for ops
	// that never use their client). Without it, a dead endpoint fails Start at once rather than every request
	// after RequestTimeout.
	LazyConnect bool
}

// Validate reports a config that would not run or would never stop.
func (c RunnerConfig) Validate() error {
	switch {
	case len(c.Endpoints) == 0:
		return errors.New("bench: no endpoints")
	case c.Conns < 0 || c.Clients < 0:
		return fmt.Errorf("bench: negative conns (%d) or clients (%d)", c.Conns, c.Clients)
	case c.Total < 0 || c.Duration < 0 || c.Rate < 0 || c.DialTimeout < 0 || c.RequestTimeout < 0:
		return errors.New("bench: negative total, duration, rate or timeout")
	case c.Total == 0 && c.Duration == 0:
		return errors.New("bench: set a total or a duration, so the run ends")
	}
	return nil
}

func (c RunnerConfig) withDefaults() RunnerConfig {
	if c.Conns == 0 {
		c.Conns = 1
	}
	if c.Clients == 0 {
		c.Clients = 1
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
	return c
}

// Params describes the config as Summary.Params entries.
func (c RunnerConfig) Params() map[string]string {
	return map[string]string{
		"endpoints":     strings.Join(c.Endpoints, ","),
		"target_leader": strconv.FormatBool(c.TargetLeader),
		"conns":         strconv.Itoa(c.Conns),
		"clients":       strconv.Itoa(c.Clients),
		"total":         strconv.FormatInt(c.Total, 10),
		"duration":      c.Duration.String(),
		"rate":          strconv.FormatFloat(c.Rate, 'g', -1, 64),
	}
}

// Runner drives benchmark Ops over a fixed set of connections. New → Start → Run (any number of times) → Stop.
type Runner struct {
	cfg   RunnerConfig
	conns []*clientv3.Client
}

// NewRunner checks cfg and applies defaults; it opens no connection.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg.withDefaults()}, nil
}

// Config returns the runner's config with defaults applied.
func (r *Runner) Config() RunnerConfig { return r.cfg }

// Start opens Conns client connections (to the leader only, with TargetLeader).
func (r *Runner) Start(ctx context.Context) error {
	if r.cfg.TargetLeader {
		leader, err := leaderEndpoints(ctx, r.cfg)
		if err != nil {
			return err
		}
		r.cfg.Endpoints = leader
	}
	for i := range r.cfg.Conns {
		endpoint := r.cfg.Endpoints[i%len(r.cfg.Endpoints)]
		conn, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{endpoint},
			DialTimeout: r.cfg.DialTimeout,
			TLS:         r.cfg.TLS,
			Username:    r.cfg.Username,
			Password:    r.cfg.Password,
			Context:     ctx,
			Logger:      zap.NewNop(), // failures are counted in the report, not logged per request
		})
		if err == nil && !r.cfg.LazyConnect {
			err = waitConnected(ctx, conn, r.cfg.DialTimeout)
		}
		if err != nil {
			if conn != nil {
				_ = conn.Close()
			}
			r.Stop(ctx)
			return fmt.Errorf("bench: connection %d to %s: %w", i, endpoint, err)
		}
		r.conns = append(r.conns, conn)
	}
	return nil
}

// waitConnected waits until conn's gRPC connection is up: clientv3 dials lazily and retries an unreachable
// server forever, so without this a dead endpoint would only show as every request timing out.
func waitConnected(ctx context.Context, conn *clientv3.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cc := conn.ActiveConnection()
	cc.Connect()
	for {
		state := cc.GetState()
		if state == connectivity.Ready {
			return nil
		}
		if !cc.WaitForStateChange(ctx, state) {
			return fmt.Errorf("not connected within --dial-timeout %s (%s): %w", timeout, state, ErrUnreachable)
		}
	}
}

// ErrUnreachable is why Start fails when an endpoint does not answer within the dial timeout.
var ErrUnreachable = errors.New("bench: endpoint unreachable")

// leaderEndpoints returns the client URLs of the raft leader of the cluster at cfg's endpoints.
func leaderEndpoints(ctx context.Context, cfg RunnerConfig) ([]string, error) {
	endpoints, dialTimeout := cfg.Endpoints, cfg.DialTimeout
	client, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: dialTimeout, TLS: cfg.TLS, Context: ctx, Logger: zap.NewNop(),
		Username: cfg.Username, Password: cfg.Password,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: finding the leader: %w", err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var leader uint64
	var statusErrs []error
	for _, endpoint := range endpoints {
		status, err := client.Status(ctx, endpoint)
		if err == nil && status.Leader == 0 {
			err = errors.New("no leader")
		}
		if err != nil {
			statusErrs = append(statusErrs, fmt.Errorf("%s: %w", endpoint, err))
			continue
		}
		leader = status.Leader
		break
	}
	if leader == 0 {
		return nil, fmt.Errorf("bench: no endpoint knows a leader: %w", errors.Join(statusErrs...))
	}
	members, err := client.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: finding the leader's client URLs: %w", err)
	}
	for _, m := range members.Members {
		if m.ID == leader && len(m.ClientURLs) > 0 {
			return m.ClientURLs, nil
		}
	}
	return nil, fmt.Errorf("bench: leader %x has no client URLs in the member list", leader)
}

// Clients returns the client each worker uses, index = worker; workers share the Conns connections
// round-robin. Benchmarks use it to set up state (watchers, leases) on the same connections.
func (r *Runner) Clients() []*clientv3.Client {
	clients := make([]*clientv3.Client, r.cfg.Clients)
	for i := range clients {
		clients[i] = r.conns[i%len(r.conns)]
	}
	return clients
}

// Stop closes every connection.
func (r *Runner) Stop(context.Context) error {
	var errs []error
	for _, conn := range r.conns {
		errs = append(errs, conn.Close())
	}
	r.conns = nil
	return errors.Join(errs...)
}

// Run calls op from every worker until Total requests were issued or Duration passed, and summarises the
// latencies. If ctx ends first, Run stops early and returns the partial summary with ctx's error; requests
// cut short by the cancellation are not counted.
func (r *Runner) Run(ctx context.Context, name string, op Op) (Summary, error) {
	return r.drive(ctx, NewReport(name), op, true)
}

// Drive issues op under the same bounds, rate limit and progress bar as Run, but records only op's errors:
// op, or goroutines it feeds, records its own samples into report. It is for benchmarks where one request is
// not one sample, e.g. watch-latency (a put per request, a latency per watcher that sees it). The summary
// covers everything in report over the run's wall time.
func (r *Runner) Drive(ctx context.Context, report *Report, op Op) (Summary, error) {
	return r.drive(ctx, report, op, false)
}

func (r *Runner) drive(ctx context.Context, report *Report, op Op, recordLatency bool) (Summary, error) {
	if len(r.conns) == 0 {
		return Summary{}, errors.New("bench: Run before Start")
	}
	limiter := rate.NewLimiter(rate.Inf, 1)
	if r.cfg.Rate > 0 {
		limiter = rate.NewLimiter(rate.Limit(r.cfg.Rate), 1)
	}
	var stopIssuing time.Time // zero: no time bound
	if r.cfg.Duration > 0 {
		stopIssuing = time.Now().Add(r.cfg.Duration)
	}
	var issued atomic.Int64
	began := time.Now()
	meter := r.startProgress(began, &issued)
	var nextSeq atomic.Int64
	var workers sync.WaitGroup
	for _, client := range r.Clients() {
		workers.Go(func() {
			for {
				seq := nextSeq.Add(1) - 1
				if r.cfg.Total > 0 && seq >= r.cfg.Total || !stopIssuing.IsZero() && time.Now().After(stopIssuing) {
					return
				}
				if limiter.Wait(ctx) != nil {
					return
				}
				start := time.Now()
				err := r.issue(ctx, op, client, seq)
				if ctx.Err() != nil {
					return // cut short by cancellation: neither a latency nor a server error
				}
				if recordLatency || err != nil {
					report.Record(time.Since(start), err)
				}
				issued.Add(1)
			}
		})
	}
	workers.Wait()
	elapsed := time.Since(began)
	meter.Stop()
	summary := report.Summary(elapsed)
	summary.Params = r.cfg.Params()
	return summary, ctx.Err()
}

// issue runs one request under RequestTimeout.
func (r *Runner) issue(ctx context.Context, op Op, client *clientv3.Client, seq int64) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	return op(ctx, client, seq)
}

// startProgress shows on cfg.Progress how many requests were issued: out of Total, or with the time elapsed
// when only Duration bounds the run (progress.Meter: redrawn on a terminal, a line every few seconds else).
func (r *Runner) startProgress(began time.Time, issued *atomic.Int64) *progress.Meter {
	return progress.Start(r.cfg.Progress, func() string {
		elapsed := time.Since(began).Round(time.Second)
		if r.cfg.Total == 0 {
			return fmt.Sprintf("%d requests, %s of %s", issued.Load(), elapsed, r.cfg.Duration)
		}
		n := issued.Load()
		return fmt.Sprintf("%d / %d requests (%d%%), %s", n, r.cfg.Total, n*100/r.cfg.Total, elapsed)
	})
}
