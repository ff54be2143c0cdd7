package consensusclient

import (
	"context"
	"sync"
	"time"
)

// readIndexTimeout bounds one shared ReadIndex RPC; consensus itself gives up after its request timeout
// (5 s + 2 × election timeout with etcd's defaults).
const readIndexTimeout = 10 * time.Second

// readBatcher shares ReadIndex RPCs among concurrent callers, as etcd's linearizable read loop shares one
// raft read among concurrent reads. At most one RPC is in flight; callers that arrive while it is in flight
// wait for the next one, which starts after they arrived, so every caller still gets an index a quorum
// confirmed after its call began (what a linearizable read needs), with one RPC per round instead of one per
// caller.
type readBatcher struct {
	call func(ctx context.Context) (uint64, error)

	mu      sync.Mutex
	next    *readRound // the round new callers join; nil when nobody waits
	running bool       // a goroutine is running rounds
}

// readRound is one shared RPC; index and err are set before done closes.
type readRound struct {
	done  chan struct{}
	index uint64
	err   error
}

// readIndex joins the next round and waits for it or for ctx.
func (b *readBatcher) readIndex(ctx context.Context) (uint64, error) {
	b.mu.Lock()
	if b.next == nil {
		b.next = &readRound{done: make(chan struct{})}
	}
	round := b.next
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case <-round.done:
		return round.index, round.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// run runs rounds back to back while callers wait for one.
func (b *readBatcher) run() {
	for {
		b.mu.Lock()
		round := b.next
		b.next = nil
		if round == nil {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), readIndexTimeout)
		round.index, round.err = b.call(ctx)
		cancel()
		close(round.done)
	}
}
