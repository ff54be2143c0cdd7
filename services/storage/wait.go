package storage

import (
	"sync"
	"time"

	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// waiters maps the request IDs this storage proposed to what waits for their apply: a Submit's goroutine
// (register) or a function the apply loop calls (registerFunc, for a write answered from the apply path).
type waiters struct {
	mu sync.Mutex
	m  map[uint64]func(applied)
}

// applied is what the apply loop hands a waiting Submit: the result, and when the apply started and ended (the
// Submit's storage.wait_commit ends at start, its storage.wait_applied starts at end).
type applied struct {
	res        *mvcc.Result
	start, end time.Time
}

func newWaiters() *waiters { return &waiters{m: make(map[uint64]func(applied))} }

// register returns the channel that receives id's apply.
func (w *waiters) register(id uint64) <-chan applied {
	ch := make(chan applied, 1)
	w.registerFunc(id, func(a applied) { ch <- a })
	return ch
}

// registerFunc has the apply loop call done with id's apply; done must not block.
func (w *waiters) registerFunc(id uint64, done func(applied)) {
	w.mu.Lock()
	w.m[id] = done
	w.mu.Unlock()
}

// cancel forgets the waiter of id.
func (w *waiters) cancel(id uint64) { w.take(id) }

// take forgets the waiter of id and reports whether it was still waiting: exactly one of take and trigger
// finds it, so whoever does answers the write.
func (w *waiters) take(id uint64) bool {
	w.mu.Lock()
	_, ok := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	return ok
}

// trigger hands a to the waiter of id, if one is waiting, with a.end set to now.
func (w *waiters) trigger(id uint64, a applied) {
	w.mu.Lock()
	done := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	if done != nil {
		a.end = time.Now()
		done(a)
	}
}
