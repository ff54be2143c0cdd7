package link

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// goResult is what a Client.Go's done received.
type goResult struct {
	body []byte
	err  error
}

// goCall runs Client.Go and returns where its one answer arrives; a second call of done fails the test.
func goCall(t *testing.T, ctx context.Context, c *Client, method uint64, body []byte) <-chan goResult {
	t.Helper()
	results := make(chan goResult, 2)
	c.Go(ctx, method, body, func(answer []byte, err error) { results <- goResult{answer, err} })
	return results
}

// oneResult waits for the result on results and checks that no second one follows.
func oneResult(t *testing.T, results <-chan goResult) goResult {
	t.Helper()
	var r goResult
	select {
	case r = <-results:
	case <-time.After(10 * time.Second):
		t.Fatal("Go's done was not called within 10s")
	}
	select {
	case again := <-results:
		t.Fatalf("Go's done called twice: %v, then %v", r, again)
	case <-time.After(20 * time.Millisecond):
	}
	return r
}

// TestGoAnswersAsCallDoes checks that Go's done receives, once, what Call would have returned: answers from
// every kind of handler, the server's errors, a NotSent mark, and the sweep's expiry of an unanswered call.
func TestGoAnswersAsCallDoes(t *testing.T) {
	ts := startServer(t)
	for _, tc := range []struct {
		name        string
		ctx         func() (context.Context, context.CancelFunc)
		addr        func(t *testing.T) string
		method      uint64
		want        string
		code        codes.Code
		wantNotSent bool
	}{
		{name: "on the receiving goroutine", method: methodEcho, want: "ping"},
		{name: "on a worker", method: methodWorker, want: "w:ping"},
		{name: "from another owner", method: methodLater, want: "later"},
		{name: "unknown method", method: methodUnknown, code: codes.Unimplemented},
		{name: "refused not sent", method: methodRefuse, code: codes.Unavailable, wantNotSent: true},
		{name: "dial failure", method: methodEcho, code: codes.Unavailable, wantNotSent: true,
			addr: func(t *testing.T) string {
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := lis.Addr().String()
				_ = lis.Close()
				return addr
			}},
		{name: "context already ended", method: methodEcho, code: codes.Canceled,
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			}},
		{name: "unanswered past its deadline", method: methodEcho, code: codes.DeadlineExceeded,
			addr: startSilentServer,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := ts.addr
			if tc.addr != nil {
				addr = tc.addr(t)
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.ctx != nil {
				ctx, cancel = tc.ctx()
			}
			defer cancel()
			c := newClient(t, addr)
			r := oneResult(t, goCall(t, ctx, c, tc.method, []byte("ping")))
			if status.Code(r.err) != tc.code || string(r.body) != tc.want {
				t.Fatalf("Go answered %q, %v; want %q, code %v", r.body, r.err, tc.want, tc.code)
			}
			if errors.Is(r.err, ErrNotSent) != tc.wantNotSent {
				t.Fatalf("Go's error %v: not sent = %v, want %v", r.err, !tc.wantNotSent, tc.wantNotSent)
			}
			checkIdle(t, c)
		})
	}
}

// TestGoFailsCallsInFlightWhenTheConnectionBreaks checks that calls sent with Go and waiting on a connection
// that breaks each get one error, not marked NotSent (they may have been carried out).
func TestGoFailsCallsInFlightWhenTheConnectionBreaks(t *testing.T) {
	ts := startServer(t)
	c := newClient(t, ts.addr)
	const calls = 3
	var results []<-chan goResult
	for range calls {
		results = append(results, goCall(t, context.Background(), c, methodBlock, nil))
	}
	for range calls {
		select {
		case <-ts.started:
		case <-time.After(10 * time.Second):
			t.Fatal("blocking calls did not start")
		}
	}
	ts.breakAll()
	for i, res := range results {
		r := oneResult(t, res)
		if status.Code(r.err) != codes.Unavailable || errors.Is(r.err, ErrNotSent) {
			t.Fatalf("call %d after the break: %v; want Unavailable, not marked not sent", i, r.err)
		}
	}
}

// TestGoAnswersManyInFlight checks that many calls in flight together through Go, with no goroutine of the
// caller waiting, are each answered once and correctly from the link's own goroutines.
func TestGoAnswersManyInFlight(t *testing.T) {
	ts := startServer(t)
	c := newClient(t, ts.addr)
	const calls = 200
	var wg sync.WaitGroup
	wg.Add(calls)
	var mu sync.Mutex
	var failed []error
	for range calls {
		c.Go(context.Background(), methodWorker, []byte("x"), func(answer []byte, err error) {
			if err != nil || string(answer) != "w:x" {
				mu.Lock()
				failed = append(failed, errors.Join(err, errors.New(string(answer))))
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d of %d calls failed, first: %v", len(failed), calls, failed[0])
	}
}
