package transport

import (
	"sync"
	"sync/atomic"
)

// Faults drops messages to and from blocked members, in both directions, on the member it is installed on.
// It exists to partition a member in tests with the real transport in place; a nil *Faults drops nothing.
type Faults struct {
	mu      sync.RWMutex
	blocked map[uint64]bool
	dropped atomic.Int64
}

// NewFaults returns a Faults that blocks no one.
func NewFaults() *Faults { return &Faults{blocked: map[uint64]bool{}} }

// Block drops every message to or from the given members.
func (f *Faults) Block(ids ...uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.blocked[id] = true
	}
}

// Unblock lets messages to and from the given members through again.
func (f *Faults) Unblock(ids ...uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		delete(f.blocked, id)
	}
}

// drops reports whether a message from one member to another is to be dropped.
func (f *Faults) drops(from, to uint64) bool {
	if f == nil {
		return false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	drop := f.blocked[from] || f.blocked[to]
	if drop {
		f.dropped.Add(1)
	}
	return drop
}

// Dropped returns how many messages were dropped so far.
func (f *Faults) Dropped() int64 { return f.dropped.Load() }
