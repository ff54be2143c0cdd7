package storage

import (
	"bytes"
	"sync"
	"time"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// waiters maps the request IDs this storage proposed to what waits for their apply: a Submit's goroutine
// (register) or a function the apply loop calls (registerFunc, for a write answered from the apply path). A
// function registered with a deadline is called with an empty applied (res nil) when the deadline passes
// first: one timer, set for the earliest deadline still waiting, serves every write, where a context.AfterFunc
// per write cost a child context and ~470 bytes.
type waiters struct {
	mu        sync.Mutex
	m         map[uint64]waiter
	deadlines []deadline  // min-heap; entries whose write was answered are dropped when they reach the top
	timer     *time.Timer // made on first use; fires expire
	armedFor  int64       // the deadline the timer is set for, Unix nanoseconds; 0: not set
	stopped   bool
}

// waiter is what waits for one proposed write: done, and the entry as proposed and its encoding, which the
// apply uses instead of decoding the committed bytes again when they are the same (proposed).
type waiter struct {
	done    func(applied)
	entry   *storagepb.Entry
	encoded []byte
}

// deadline is when the write of id, if still waiting, is answered as expired.
type deadline struct {
	at int64 // Unix nanoseconds
	id uint64
}

// applied is what the apply loop hands a waiting Submit: the result, and when the apply started and ended (the
// Submit's storage.wait_commit ends at start, its storage.wait_applied starts at end). An expired write gets
// one with res nil.
type applied struct {
	res        *mvcc.Result
	start, end time.Time
}

func newWaiters() *waiters { return &waiters{m: make(map[uint64]waiter)} }

// register returns the channel that receives the apply of entry (its request's ID), proposed as encoded.
func (w *waiters) register(entry *storagepb.Entry, encoded []byte) <-chan applied {
	ch := make(chan applied, 1)
	w.registerFunc(waiter{done: func(a applied) { ch <- a }, entry: entry, encoded: encoded}, time.Time{})
	return ch
}

// registerFunc has the apply loop call wt.done with the apply of wt.entry (its request's ID), or expire call it
// with an empty applied once until passes first (never when until is zero); done must not block.
func (w *waiters) registerFunc(wt waiter, until time.Time) {
	id := wt.entry.Request.ID
	w.mu.Lock()
	defer w.mu.Unlock()
	w.m[id] = wt
	if until.IsZero() || w.stopped {
		return
	}
	w.dropAnswered() // so the heap holds about the writes waiting, not every write of the last timeout
	w.push(deadline{at: until.UnixNano(), id: id})
	if w.armedFor == 0 || until.UnixNano() < w.armedFor {
		w.arm()
	}
}

// dropAnswered drops the deadlines of writes already answered from the top of the heap; w.mu is held.
func (w *waiters) dropAnswered() {
	for len(w.deadlines) > 0 {
		if _, waiting := w.m[w.deadlines[0].id]; waiting {
			return
		}
		w.pop()
	}
}

// cancel forgets the waiter of id.
func (w *waiters) cancel(id uint64) { w.take(id) }

// take forgets the waiter of id and reports whether it was still waiting: exactly one of take, trigger and
// expire finds it, so whoever does answers the write.
func (w *waiters) take(id uint64) bool {
	w.mu.Lock()
	_, ok := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	return ok
}

// trigger hands a to the waiter of id, if one is waiting.
func (w *waiters) trigger(id uint64, a applied) {
	w.mu.Lock()
	wt, ok := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	if ok {
		wt.done(a)
	}
}

// proposed returns the entry of the write id still waiting, if encoded is how it was proposed: the apply of
// that entry can use it as it is. Nothing modifies a proposed entry.
func (w *waiters) proposed(id uint64, encoded []byte) (*storagepb.Entry, bool) {
	w.mu.Lock()
	wt, ok := w.m[id]
	w.mu.Unlock()
	if !ok || !bytes.Equal(wt.encoded, encoded) {
		return nil, false
	}
	return wt.entry, true
}

// expire answers the waiters whose deadline has passed, and sets the timer for the next one still waiting.
func (w *waiters) expire() {
	now := time.Now().UnixNano()
	var due []func(applied)
	w.mu.Lock()
	for len(w.deadlines) > 0 && w.deadlines[0].at <= now {
		id := w.pop().id
		if wt, ok := w.m[id]; ok {
			delete(w.m, id)
			due = append(due, wt.done)
		}
	}
	w.armedFor = 0
	if !w.stopped {
		w.arm()
	}
	w.mu.Unlock()
	for _, done := range due {
		done(applied{})
	}
}

// arm drops the deadlines of writes already answered from the top of the heap and sets the timer for the
// first one still waiting, if any; w.mu is held.
func (w *waiters) arm() {
	w.dropAnswered()
	if len(w.deadlines) == 0 {
		return
	}
	w.armedFor = w.deadlines[0].at
	wait := time.Until(time.Unix(0, w.armedFor))
	if w.timer == nil {
		w.timer = time.AfterFunc(wait, w.expire)
		return
	}
	w.timer.Reset(wait)
}

// stop stops the timer; writes still waiting are answered by the apply loop or not at all.
func (w *waiters) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// push adds d to the heap; w.mu is held.
func (w *waiters) push(d deadline) {
	h := append(w.deadlines, d)
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if h[parent].at <= h[i].at {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
	w.deadlines = h
}

// pop removes and returns the earliest deadline; the heap is not empty and w.mu is held.
func (w *waiters) pop() deadline {
	h := w.deadlines
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		least, left, right := i, 2*i+1, 2*i+2
		if left < len(h) && h[left].at < h[least].at {
			least = left
		}
		if right < len(h) && h[right].at < h[least].at {
			least = right
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	w.deadlines = h
	return top
}
