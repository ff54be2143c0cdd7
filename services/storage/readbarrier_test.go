package storage

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/obs"
)

// TestReadBarrierSharesRoundsThatStartAfterTheRead checks that concurrent reads share ReadIndex calls, and
// that no read is answered by a round that began before it arrived.
func TestReadBarrierSharesRoundsThatStartAfterTheRead(t *testing.T) {
	var calls atomic.Uint64
	release := make(chan struct{})
	b := newReadBarrier(func(ctx context.Context) (uint64, error) {
		n := calls.Add(1) // the index is the round's number: a later round has a higher one
		select {
		case <-release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return n, nil
	}, 5*time.Second, obs.StageTracer{})
	ctx := context.Background()
	first := make(chan uint64, 1)
	go func() { i, _ := b.readIndex(ctx); first <- i }()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// Round 1 is in flight: these 50 reads arrived after it began and must get round 2.
	var wg sync.WaitGroup
	got := make([]uint64, 50)
	for i := range got {
		wg.Go(func() {
			index, err := b.readIndex(ctx)
			if err != nil {
				t.Error(err)
			}
			got[i] = index
		})
	}
	// Release round 1 only once every read has joined round 2: on a loaded machine some goroutines start late,
	// and a read that arrives after round 2 began rightly waits for a round 3.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		queued := 0
		if b.next != nil {
			queued = b.next.reads.Size()
		}
		b.mu.Unlock()
		if queued == len(got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d reads queued for the next round within 5 s", queued, len(got))
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if i := <-first; i != 1 {
		t.Fatalf("first read got round %d", i)
	}
	for _, index := range got {
		if index < 2 {
			t.Fatalf("a read that arrived during round 1 was answered by it")
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d ReadIndex calls for 51 reads; want 2 (the one in flight, then one for all that queued)", n)
	}
}
