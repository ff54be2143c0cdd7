package watchhub

import (
	"context"
	"sync"
	"time"

	"github.com/cairn-kv/cairn/internal/storageclient"
)

// freshness makes "now" mean now: before a watch is created, the hub learns storage's current revision and
// waits until its own head has reached it, so a watch created after a write was acknowledged never receives
// that write, and its created header carries the revision etcd would give. A Status call that started after
// a request was received answers for it: every write acknowledged before the client sent the request is
// applied by then. So one call serves every create received before it started (a burst of creates costs one
// or two calls), and creates received during a call wait for the next one.
type freshness struct {
	hub      *Hub
	requests chan chan int64

	mu        sync.Mutex
	lastStart time.Time // when the last successful call started
	lastRev   int64     // and what it answered
}

func newFreshness(h *Hub) *freshness {
	return &freshness{hub: h, requests: make(chan chan int64, 1024)}
}

// run answers batches of requests with one storage revision each (0 when no storage answered).
func (f *freshness) run(ctx context.Context) {
	for {
		var batch []chan int64
		select {
		case <-ctx.Done():
			return
		case r := <-f.requests:
			batch = append(batch, r)
		}
		for drained := false; !drained; {
			select {
			case r := <-f.requests:
				batch = append(batch, r)
			default:
				drained = true
			}
		}
		start := time.Now()
		rev := f.storageRevision(ctx)
		if rev > 0 {
			f.mu.Lock()
			f.lastStart, f.lastRev = start, rev
			f.mu.Unlock()
		}
		for _, r := range batch {
			r <- rev
		}
	}
}

// storageRevision is the revision of the first storage that answers Status, or 0 when none does.
func (f *freshness) storageRevision(ctx context.Context) int64 {
	var rev int64
	_ = f.hub.pool.Do(ctx, func(ctx context.Context, c *storageclient.Client) error {
		st, err := c.Status(ctx)
		if err == nil {
			rev = st.Revision
		}
		return err
	})
	return rev
}

// await waits until the hub's head has reached storage's revision at a time after received (when the create
// request arrived), or until the storage timeout: then the watch is created at the head the hub has (degraded,
// never wrong: it only starts later than asked).
func (f *freshness) await(ctx context.Context, received time.Time) {
	deadline := time.Now().Add(f.hub.cfg.StorageTimeout)
	f.hub.waitAwake(ctx, deadline)
	f.mu.Lock()
	covered, rev := received.Before(f.lastStart), f.lastRev
	f.mu.Unlock()
	if covered {
		f.hub.awaitHead(ctx, rev, deadline)
		return
	}
	answer := make(chan int64, 1)
	select {
	case f.requests <- answer:
	case <-ctx.Done():
		return
	}
	select {
	case rev = <-answer:
	case <-ctx.Done():
		return
	case <-time.After(time.Until(deadline)):
		return
	}
	f.hub.awaitHead(ctx, rev, deadline)
}

// awaitHead waits until the head is at least rev, ctx ends or deadline passes.
func (h *Hub) awaitHead(ctx context.Context, rev int64, deadline time.Time) {
	timeout := time.After(time.Until(deadline))
	for {
		h.headMu.Lock()
		advanced := h.headAdvanced
		h.headMu.Unlock()
		if h.headRev.Load() >= rev {
			return
		}
		select {
		case <-advanced:
		case <-ctx.Done():
			return
		case <-timeout:
			return
		}
	}
}

// notifyHead wakes the waiters of awaitHead after the head advanced.
func (h *Hub) notifyHead() {
	h.headMu.Lock()
	close(h.headAdvanced)
	h.headAdvanced = make(chan struct{})
	h.headMu.Unlock()
}
