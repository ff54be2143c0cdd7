package leasekeeper

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/storageclient"
)

// storagePool is the keeper's way to storage: one client per endpoint, calls go to the current one and move on
// to the next endpoint when it is unavailable.
type storagePool struct {
	endpoints []string
	logger    *slog.Logger

	mu      sync.Mutex
	clients []*storageclient.Client
	current int
}

func newStoragePool(endpoints []string, dialOpts []grpc.DialOption, logger *slog.Logger) (*storagePool, error) {
	p := &storagePool{endpoints: endpoints, logger: logger}
	for _, e := range endpoints {
		c, err := storageclient.Dial(e, dialOpts...)
		if err != nil {
			p.close()
			return nil, err
		}
		p.clients = append(p.clients, c)
	}
	return p, nil
}

// do calls f with the current storage, trying each endpoint once in turn while f fails with codes.Unavailable.
// f must be safe to repeat on another storage.
func (p *storagePool) do(ctx context.Context, f func(*storageclient.Client) error) error {
	p.mu.Lock()
	start := p.current
	p.mu.Unlock()
	var err error
	for i := range p.clients {
		n := (start + i) % len(p.clients)
		if err = f(p.clients[n]); !failsOver(err) || ctx.Err() != nil {
			if i > 0 && err == nil {
				p.mu.Lock()
				p.current = n
				p.mu.Unlock()
				p.logger.Info("storage endpoint failed over", "endpoint", p.endpoints[n])
			}
			return err
		}
	}
	return err // every endpoint is unavailable: the last one's error
}

// failsOver reports whether err means the storage could not serve the call at all.
func failsOver(err error) bool {
	if err == nil {
		return false
	}
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unavailable && !errors.Is(err, context.Canceled)
}

func (p *storagePool) close() {
	for _, c := range p.clients {
		_ = c.Close()
	}
}
