package watchhub

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRelayFlow: a stream sends relayFlowMinBatches unacknowledged batches and then waits for an
// acknowledgment, for its reader being stuck, or for its end; wait waits alike without counting a batch; the
// limit follows the acknowledgments of the last window.
func TestRelayFlow(t *testing.T) {
	ctx := t.Context()
	type result struct {
		waited bool
		err    error
	}
	call := func(f *relayFlow, closed chan struct{}, counts bool) <-chan result {
		done := make(chan result, 1)
		go func() {
			var r result
			if counts {
				r.waited, r.err = f.await(ctx, closed)
			} else {
				r.waited, r.err = f.wait(ctx, closed)
			}
			done <- r
		}()
		return done
	}
	awaits := func(f *relayFlow, closed chan struct{}) <-chan result { return call(f, closed, true) }
	blocked := func(done <-chan result) {
		t.Helper()
		select {
		case r := <-done:
			t.Fatalf("await returned %v with the limit reached", r.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	returned := func(done <-chan result, want error, waited bool) {
		t.Helper()
		select {
		case r := <-done:
			if !errors.Is(r.err, want) || r.waited != waited {
				t.Fatalf("await = %v, waited %t; want %v, waited %t", r.err, r.waited, want, waited)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("await did not return")
		}
	}
	sent := func(f *relayFlow, want uint64) {
		t.Helper()
		if got := f.sent.Load(); got != want {
			t.Fatalf("sent %d, want %d", got, want)
		}
	}

	f, closed := newRelayFlow(), make(chan struct{})
	for range relayFlowMinBatches {
		returned(awaits(f, closed), nil, false)
	}
	done := awaits(f, closed)
	blocked(done)
	f.ack(1)
	returned(done, nil, true)
	sent(f, relayFlowMinBatches+1)
	f.ack(1) // not news
	done = call(f, closed, false)
	blocked(done)
	f.ack(2)
	returned(done, nil, true)
	sent(f, relayFlowMinBatches+1) // wait counts nothing
	returned(call(f, closed, false), nil, false)
	returned(awaits(f, closed), nil, false)
	done = awaits(f, closed)
	blocked(done)
	f.setStuck(true)
	returned(done, nil, true)
	f.setStuck(false)
	done = awaits(f, closed)
	blocked(done)
	close(closed)
	returned(done, errStreamEnded, true)

	f = newRelayFlow()
	cctx, cancel := context.WithCancel(ctx)
	for range relayFlowMinBatches {
		if _, err := f.await(cctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	go cancel()
	if _, err := f.wait(cctx, nil); !errors.Is(err, context.Canceled) {
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
