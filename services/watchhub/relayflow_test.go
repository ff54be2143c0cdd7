package watchhub

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRelayFlow: a stream sends relayFlowMinBatches unacknowledged batches and then waits for an
// acknowledgment, for its reader being stuck, or for its end; the limit follows the acknowledgments of the last
// window.
func TestRelayFlow(t *testing.T) {
	ctx := t.Context()
	awaits := func(f *relayFlow, closed chan struct{}) <-chan error {
		done := make(chan error, 1)
		go func() { done <- f.await(ctx, closed) }()
		return done
	}
	blocked := func(done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("await returned %v with the limit reached", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	returned := func(done <-chan error, want error) {
		t.Helper()
		select {
		case err := <-done:
			if !errors.Is(err, want) {
				t.Fatalf("await = %v, want %v", err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("await did not return")
		}
	}

	f, closed := newRelayFlow(), make(chan struct{})
	for range relayFlowMinBatches {
		returned(awaits(f, closed), nil)
	}
	done := awaits(f, closed)
	blocked(done)
	f.ack(1)
	returned(done, nil)
	if got := f.sent.Load(); got != relayFlowMinBatches+1 {
		t.Fatalf("sent %d, want %d", got, relayFlowMinBatches+1)
	}
	f.ack(1) // not news
	done = awaits(f, closed)
	blocked(done)
	f.setStuck(true)
	returned(done, nil)
	f.setStuck(false)
	done = awaits(f, closed)
	blocked(done)
	close(closed)
	returned(done, errStreamEnded)

	f = newRelayFlow()
	cctx, cancel := context.WithCancel(ctx)
	for range relayFlowMinBatches {
		if err := f.await(cctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	go cancel()
	if err := f.await(cctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("await after cancel = %v", err)
	}

	f = newRelayFlow()
	t0 := time.Now()
	for _, step := range []struct {
		at    time.Duration
		acked uint64
		want  uint64
	}{
		{0, 0, relayFlowMinBatches},                                       // nothing known
		{100 * time.Millisecond, 10, relayFlowMinBatches},                 // the window has not ended
		{relayFlowWindow + time.Millisecond, 10, 10},                      // 10 in the last window
		{2*relayFlowWindow + 2*time.Millisecond, 11, relayFlowMinBatches}, // 1 in the last: the floor
		{10 * relayFlowWindow, 50, relayFlowMinBatches},                   // a gap of windows: nothing known
	} {
		f.ack(step.acked)
		if got := f.limit(t0.Add(step.at)); got != step.want {
			t.Fatalf("at %v with %d acknowledged: limit %d, want %d", step.at, step.acked, got, step.want)
		}
	}
}
