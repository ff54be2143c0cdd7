package storage

import (
	"sync"

	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// waiters maps the request IDs this storage proposed to the Submit calls waiting for their apply.
type waiters struct {
	mu sync.Mutex
	m  map[uint64]chan *mvcc.Result
}

func newWaiters() *waiters { return &waiters{m: make(map[uint64]chan *mvcc.Result)} }

func (w *waiters) register(id uint64) <-chan *mvcc.Result {
	ch := make(chan *mvcc.Result, 1)
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

// trigger hands res to the waiter of id, if one is waiting.
func (w *waiters) trigger(id uint64, res *mvcc.Result) {
	w.mu.Lock()
	ch := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	if ch != nil {
		ch <- res
	}
}
