package storage

import (
	"sync"
	"time"

	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// waiters maps the request IDs this storage proposed to the Submit calls waiting for their apply.
type waiters struct {
	mu sync.Mutex
	m  map[uint64]chan applied
}

// applied is what the apply loop hands a waiting Submit: the result, and when the apply started and ended (the
// Submit's storage.wait_commit ends at start, its storage.wait_applied starts at end).
type applied struct {
	res        *mvcc.Result
	start, end time.Time
}

func newWaiters() *waiters { return &waiters{m: make(map[uint64]chan applied)} }

func (w *waiters) register(id uint64) <-chan applied {
	ch := make(chan applied, 1)
	w.mu.Lock()
	w.m[id] = ch
	w.mu.Unlock()
	return ch
}

func (w *waiters) cancel(id uint64) {
	w.mu.Lock()
	delete(w.m, id)
	w.mu.Unlock()
}

// trigger hands a to the waiter of id, if one is waiting, with a.end set to now.
func (w *waiters) trigger(id uint64, a applied) {
	w.mu.Lock()
	ch := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	if ch != nil {
		a.end = time.Now()
		ch <- a
	}
}
