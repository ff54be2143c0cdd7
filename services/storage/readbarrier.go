package storage

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/internal/obs"
)

// readBarrier shares ReadIndex calls among concurrent linearizable reads, as etcd's read loop does: a read
// waits for the first round that starts after it arrived (the one in flight may have started before it, so
// its index could miss a write acknowledged in between). One round is in flight at a time; every read that
// arrives meanwhile joins the next one, so a burst of reads costs two calls to the log, not one each.
type readBarrier struct {
	fetch   func(context.Context) (uint64, error)
	timeout time.Duration
	stages  obs.StageTracer

	mu       sync.Mutex
	inflight bool
	next     *readRound // not started yet; nil until a read needs it
}

type readRound struct {
	done  chan struct{}
	index uint64
	err   error
	reads obs.Batch // the reads waiting for it (a storage.read_index span links the sampled ones)
}

func newReadBarrier(fetch func(context.Context) (uint64, error), timeout time.Duration, stages obs.StageTracer) *readBarrier {
	return &readBarrier{fetch: fetch, timeout: timeout, stages: stages}
}

// readIndex returns a read index obtained after the call began.
func (b *readBarrier) readIndex(ctx context.Context) (uint64, error) {
	b.mu.Lock()
	round := b.next
	if round == nil {
		round = &readRound{done: make(chan struct{})}
		b.next = round
	}
	round.reads.Add(ctx)
	if !b.inflight {
		b.inflight, b.next = true, nil
		go b.run(round)
	}
	b.mu.Unlock()
	select {
	case <-round.done:
		return round.index, round.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// run performs round, then each round that filled up meanwhile, until none is waiting.
func (b *readBarrier) run(round *readRound) {
	for round != nil {
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		b.mu.Lock() // reads join the round until it starts
		span := b.stages.StartBatch("storage.read_index", &round.reads)
		b.mu.Unlock()
		round.index, round.err = b.fetch(trace.ContextWithSpan(ctx, span))
		if span.IsRecording() {
			span.SetAttributes(obs.AttrRaftIndex.Int64(int64(round.index)))
		}
		span.End()
		cancel()
		close(round.done)
		b.mu.Lock()
		round, b.next = b.next, nil
		if round == nil {
			b.inflight = false
		}
		b.mu.Unlock()
	}
}
