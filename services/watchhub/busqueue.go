package watchhub

import "sync"

// busQueue holds the records that came off the bus until the feed goroutine takes them, busQueueLength at
// most. It grows with a burst instead of holding busQueueLength slots from the start, as a channel would (a
// MiB in every hub, watched or not, which its heap goal doubles).
type busQueue struct {
	mu      sync.Mutex
	pending []busRecord
	taken   []busRecord // what take returned last, handled by the time take is called again
	// ready holds a token once pending becomes non-empty: the feed waits on it, then takes.
	ready chan struct{}
}

// keptQueueCap bounds the capacity the queue keeps for the next burst; a larger slice, left by a burst, goes.
const keptQueueCap = 1024

// push adds a record and reports whether there was room for it.
func (q *busQueue) push(br busRecord) bool {
	q.mu.Lock()
	if len(q.pending) >= busQueueLength {
		q.mu.Unlock()
		return false
	}
	q.pending = append(q.pending, br)
	first := len(q.pending) == 1
	q.mu.Unlock()
	if first {
		select {
		case q.ready <- struct{}{}:
		default: // a token is already there
		}
	}
	return true
}

// take returns every record pushed since the last take, in order; the slice is valid until the next take.
func (q *busQueue) take() []busRecord {
	q.mu.Lock()
	defer q.mu.Unlock()
	batch := q.pending
	q.pending, q.taken = keepCap(q.taken, keptQueueCap), batch
	return batch
}

// keepCap empties s for reuse, cleared so that it pins nothing; a slice whose capacity passed max (left by a
// burst) goes, and nil comes back.
func keepCap[S ~[]E, E any](s S, max int) S {
	clear(s)
	if cap(s) > max {
		return nil
	}
	return s[:0]
}
