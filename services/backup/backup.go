package backup

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cairn-kv/cairn/internal/datadir"
	"github.com/cairn-kv/cairn/services/storage/restore"
)

// Config configures the backup service.
type Config struct {
	// Endpoints are client URLs; each backup uses the first that answers.
	Endpoints []string
	// Dir holds the snapshots (created if missing).
	Dir string
	// Interval between backups (default 30m); the first is taken at Start.
	Interval time.Duration
	// Keep is how many snapshots are kept (default 48).
	Keep int
	// Timeout bounds one backup (default 10m).
	Timeout time.Duration
	// TLS is the client side of https:// endpoints, as etcdctl's --cacert, --cert and --key make it: the CA
	// that signs the endpoints' certificates and, where they ask for one, this client's certificate.
	TLS TLSFiles
}

// TLSFiles are PEM files for https:// endpoints; all empty for plain ones.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// Deps is what the backup service is given.
type Deps struct {
	// Registry receives the metrics (none when nil).
	Registry prometheus.Registerer
	// Logger receives operator logs (default slog.Default()).
	Logger *slog.Logger
}

// DefaultConfig is a Config with the defaults.
func DefaultConfig() Config {
	return Config{Interval: 30 * time.Minute, Keep: 48, Timeout: 10 * time.Minute}
}

// Validate checks c.
func (c Config) Validate() error {
	switch {
	case len(c.Endpoints) == 0:
		return errors.New("backup: --endpoints is empty")
	case c.Dir == "":
		return errors.New("backup: --dir is empty")
	case c.Interval <= 0 || c.Keep <= 0 || c.Timeout <= 0:
		return fmt.Errorf("backup: --interval %s, --keep %d and the timeout %s must be positive", c.Interval, c.Keep, c.Timeout)
	case (c.TLS.CertFile == "") != (c.TLS.KeyFile == ""):
		return errors.New("backup: --cert and --key go together")
	}
	return nil
}

// clientTLS is the TLS configuration of https:// endpoints, nil when no file is set (then https endpoints
// are verified against the system's roots).
func (c Config) clientTLS() (*tls.Config, error) {
	if c.TLS == (TLSFiles{}) {
		return nil, nil
	}
	info := transport.TLSInfo{TrustedCAFile: c.TLS.CAFile, CertFile: c.TLS.CertFile, KeyFile: c.TLS.KeyFile}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("backup: client TLS: %w", err)
	}
	return cfg, nil
}

// Service takes the backups. New, Start, Stop (safe twice).
type Service struct {
	cfg     Config
	tls     *tls.Config
	log     *slog.Logger
	metrics *metrics

	mu          sync.Mutex
	lastErr     error
	lastSuccess time.Time

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// snapshotPrefix and snapshotSuffix frame the name of a kept snapshot; tempPrefix marks one being written.
const (
	snapshotPrefix = "snapshot-"
	snapshotSuffix = ".db"
	tempPrefix     = ".incomplete-"
	timeLayout     = "20060102T150405.000Z"
)

// New checks cfg, reads its TLS files and registers the metrics; nothing runs until Start.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clientTLS, err := cfg.clientTLS()
	if err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	m, err := newMetrics(deps.Registry)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, tls: clientTLS, log: deps.Logger, metrics: m, stop: make(chan struct{}),
		done: make(chan struct{})}, nil
}

// Start creates Dir and starts the schedule: one backup now, then one every Interval.
func (s *Service) Start(context.Context) error {
	if err := os.MkdirAll(s.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	go s.run()
	return nil
}

// Stop ends the schedule, cancelling a backup in progress, and waits for it.
func (s *Service) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stop) })
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Service) run() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		_, _ = s.TakeOne(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Health fails when the last backup failed, or when no backup succeeded within two intervals of the last success.
func (s *Service) Health(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastErr != nil {
		return fmt.Errorf("last backup failed: %w", s.lastErr)
	}
	if !s.lastSuccess.IsZero() && time.Since(s.lastSuccess) > 2*s.cfg.Interval {
		return fmt.Errorf("no backup since %s", s.lastSuccess.Format(time.RFC3339))
	}
	return nil
}

// TakeOne takes, verifies and keeps one snapshot, then prunes old ones. It returns the kept file's path.
func (s *Service) TakeOne(ctx context.Context) (string, error) {
	began := time.Now()
	path, size, reason, err := s.take(ctx)
	s.mu.Lock()
	s.lastErr = err
	if err == nil {
		s.lastSuccess = time.Now()
	}
	s.mu.Unlock()
	if err != nil {
		s.metrics.failures.WithLabelValues(reason).Inc()
		s.log.Error("backup failed", "reason", reason, "err", err, "dir", s.cfg.Dir)
		return "", err
	}
	took := time.Since(began)
	s.metrics.observeSuccess(took, size)
	s.log.Info("backup taken", "path", path, "size", size, "took", took.String())
	s.prune()
	return path, nil
}

// take returns the kept path and size, or why it failed (a metrics label) and the error.
func (s *Service) take(ctx context.Context) (path string, size int64, reason string, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	s.removeIncomplete()
	now := time.Now().UTC()
	tmp := filepath.Join(s.cfg.Dir, tempPrefix+now.Format(timeLayout)+snapshotSuffix)
	defer os.Remove(tmp) // a no-op once renamed
	endpoint, size, err := s.download(ctx, tmp)
	if err != nil {
		if errors.Is(err, errWrite) {
			return "", 0, "write", err
		}
		return "", 0, "endpoints", err
	}
	if _, err := restore.Verify(tmp); err != nil {
		return "", 0, "verify", fmt.Errorf("snapshot from %s: %w", endpoint, err)
	}
	path = filepath.Join(s.cfg.Dir, snapshotPrefix+now.Format(timeLayout)+snapshotSuffix)
	if err := os.Rename(tmp, path); err != nil {
		return "", 0, "write", fmt.Errorf("rename %s: %w", tmp, err)
	}
	if err := datadir.SyncDir(s.cfg.Dir); err != nil {
		return "", 0, "write", err
	}
	return path, size, "", nil
}

// errWrite marks a failure to write the local file (as opposed to reaching an endpoint).
var errWrite = errors.New("writing the snapshot file")

// download streams a snapshot from the first endpoint that gives one into path, fsynced.
func (s *Service) download(ctx context.Context, path string) (endpoint string, size int64, err error) {
	var errs []error
	for _, endpoint := range s.cfg.Endpoints {
		size, err := s.downloadFrom(ctx, endpoint, path)
		if err == nil {
			return endpoint, size, nil
		}
		if errors.Is(err, errWrite) {
			return endpoint, 0, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", endpoint, err))
	}
	return "", 0, errors.Join(errs...)
}

func (s *Service) downloadFrom(ctx context.Context, endpoint, path string) (int64, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second,
		TLS: s.tls, Logger: zap.NewNop()})
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	// A dead endpoint would hold the snapshot call until the whole backup times out: ask it first, briefly.
	probe, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = cli.Status(probe, endpoint)
	cancel()
	if err != nil {
		return 0, err
	}
	stream, err := cli.Snapshot(ctx)
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errWrite, err)
	}
	defer f.Close()
	n, err := io.Copy(f, stream)
	if err != nil {
		var pathErr *os.PathError
		if errors.As(err, &pathErr) {
			return 0, fmt.Errorf("%w: %w", errWrite, err)
		}
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("%w: fsync %s: %w", errWrite, path, err)
	}
	return n, nil
}

// removeIncomplete removes temporary files of earlier attempts (a crash or kill -9 mid-backup).
func (s *Service) removeIncomplete() {
	entries, _ := os.ReadDir(s.cfg.Dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			_ = os.Remove(filepath.Join(s.cfg.Dir, e.Name()))
		}
	}
}

// Snapshots lists the kept snapshots, oldest first.
func (s *Service) Snapshots() []string {
	entries, _ := os.ReadDir(s.cfg.Dir)
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), snapshotPrefix) && strings.HasSuffix(e.Name(), snapshotSuffix) {
			names = append(names, filepath.Join(s.cfg.Dir, e.Name()))
		}
	}
	slices.Sort(names) // the UTC time in the name sorts by age
	return names
}

// prune removes the oldest snapshots beyond Keep.
func (s *Service) prune() {
	kept := s.Snapshots()
	for len(kept) > s.cfg.Keep {
		if err := os.Remove(kept[0]); err != nil {
			s.log.Warn("removing an old backup", "path", kept[0], "err", err)
		} else {
			s.log.Info("removed an old backup", "path", kept[0])
		}
		kept = kept[1:]
	}
}
