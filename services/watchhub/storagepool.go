package watchhub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// storagePool is the hub's view of the storages it may read from: calls go to the preferred one and fail over
// to the others in turn when it does not answer.
type storagePool struct {
	urls    []string
	clients []*storageclient.Client
	timeout time.Duration
	logger  *slog.Logger

	mu        sync.Mutex
	preferred int
}

func newStoragePool(urls []string, timeout time.Duration, tel *obs.Telemetry, logger *slog.Logger) (*storagePool, error) {
	p := &storagePool{urls: urls, timeout: timeout, logger: logger}
	for _, u := range urls {
		c, err := storageclient.Dial(u, tel.DialOptions()...)
		if err != nil {
			_ = p.close()
			return nil, fmt.Errorf("storage endpoint %s: %w", u, err)
		}
		p.clients = append(p.clients, c)
	}
	return p, nil
}

func (p *storagePool) close() error {
	var errs []error
	for _, c := range p.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

func (p *storagePool) order() []int {
	p.mu.Lock()
	first := p.preferred
	p.mu.Unlock()
	order := make([]int, len(p.clients))
	for i := range order {
		order[i] = (first + i) % len(p.clients)
	}
	return order
}

func (p *storagePool) prefer(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.preferred != i {
		p.logger.Info("watchhub reads from another storage", "storage", p.urls[i], "previous", p.urls[p.preferred])
		p.preferred = i
	}
}

// failsOver reports whether another storage might answer where this one failed: not for compaction (every
// storage agrees) nor when the caller gave up.
func failsOver(ctx context.Context, err error) bool {
	if ctx.Err() != nil || storageclient.IsCompacted(err) {
		return false
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.Canceled:
		return false
	}
	return true
}

// history streams a history request from the first storage that answers. Once a page has been handed to each,
// a failure is returned as it is (the caller resumes from what it got); each's own errors are returned too.
// It returns the compact revision the storage reported.
func (p *storagePool) history(ctx context.Context, req *storagepb.HistoryRequest,
	each func(*storagepb.HistoryResponse) error) (int64, error) {
	var lastErr error
	for _, i := range p.order() {
		delivered := false
		var eachErr error
		callCtx, cancel := context.WithTimeout(ctx, p.timeout)
		compactRev, err := p.clients[i].History(callCtx, req, func(page *storagepb.HistoryResponse) error {
			delivered = true
			eachErr = each(page)
			return eachErr
		})
		cancel()
		switch {
		case eachErr != nil:
			return compactRev, eachErr
		case err == nil || delivered || !failsOver(ctx, err):
			if err == nil {
				p.prefer(i)
			}
			return compactRev, err
		}
		lastErr = fmt.Errorf("history from storage %s: %w", p.urls[i], err)
	}
	return 0, lastErr
}

// storageStatus is one storage's answer to Status.
type storageStatus struct {
	url    string
	index  int
	status *storagepb.StatusResponse
}

// statuses asks every storage for its status at once; it returns those that answered, in endpoint order,
// and the errors of the others.
func (p *storagePool) statuses(ctx context.Context) ([]storageStatus, error) {
	results := make([]*storagepb.StatusResponse, len(p.clients))
	errs := make([]error, len(p.clients))
	var wg sync.WaitGroup
	for i, c := range p.clients {
		wg.Go(func() {
			callCtx, cancel := context.WithTimeout(ctx, p.timeout)
			defer cancel()
			st, err := c.Status(callCtx)
			if err != nil {
				errs[i] = fmt.Errorf("status of storage %s: %w", p.urls[i], err)
				return
			}
			results[i] = st
		})
	}
	wg.Wait()
	var answered []storageStatus
	for i, st := range results {
		if st != nil {
			answered = append(answered, storageStatus{url: p.urls[i], index: i, status: st})
		}
	}
	return answered, errors.Join(errs...)
}
