package watchhub

import (
	"context"
	"time"
)

// freshness makes "now" mean now: before a watch is created, the hub learns storage's current revision and
// waits until its own head has reached it, so a watch created after a write was acknowledged never receives
// that write, and its created header carries the revision etcd would give. One Status call serves every
// create that arrived before it started; creates arriving during a call wait for the next one.
type freshness struct {
	hub      *Hub
	requests chan chan int64
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
		rev := f.storageRevision(ctx)
		for _, r := range batch {
			r <- rev
		}
	}
}

func (f *freshness) storageRevision(ctx context.Context) int64 {
	p := f.hub.pool
	for _, i := range p.order() {
		callCtx, cancel := context.WithTimeout(ctx, p.timeout)
		st, err := p.clients[i].Status(callCtx)
		cancel()
		if err == nil {
			return st.Revision
		}
	}
	return 0
}

// await waits until the hub's head has reached storage's current revision, or until the storage timeout:
// then the watch is created at the head the hub has (degraded, never wrong: it only starts later than asked).
func (f *freshness) await(ctx context.Context) {
	deadline := time.Now().Add(f.hub.cfg.StorageTimeout)
	answer := make(chan int64, 1)
	select {
	case f.requests <- answer:
	case <-ctx.Done():
		return
	}
	var rev int64
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
