package link

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// startSilentServer accepts links and reads everything sent on them without ever answering, as a server
// that hangs would.
func startSilentServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	go func() {
		for {
			nc, err := lis.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				_, _ = io.Copy(io.Discard, nc)
				_ = nc.Close()
			})
		}
	}()
	t.Cleanup(func() { _ = lis.Close(); conns.Wait() })
	return lis.Addr().String()
}

// TestSweepRunsOnlyWhileDeadlinesWait checks that the sweep fails calls a silent server leaves unanswered past
// their deadline, and that once none waits the count it runs on is back to 0, after answers, expiries and
// abandoned calls alike, so an idle client sets no timer.
func TestSweepRunsOnlyWhileDeadlinesWait(t *testing.T) {
	for _, tc := range []struct {
		name  string
		calls func(t *testing.T)
	}{
		{"answered", func(t *testing.T) {
			c := newClient(t, startServer(t).addr)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for range 3 {
				if _, err := c.Call(ctx, methodEcho, []byte("ping")); err != nil {
					t.Fatal(err)
				}
			}
			checkIdle(t, c)
		}},
		{"swept past the deadline", func(t *testing.T) {
			c := NewClient(ClientConfig{Addr: startSilentServer(t), Preamble: testPreamble, Lanes: 2, Name: "test",
				Bound: 50 * time.Millisecond})
			t.Cleanup(c.Close)
			for round := range 2 { // the sweep wakes again after it has parked
				var calls sync.WaitGroup
				for range 4 {
					calls.Go(func() {
						_, err := c.Call(context.Background(), methodEcho, nil) // no context deadline: only the sweep ends it
						if status.Code(err) != codes.DeadlineExceeded {
							t.Errorf("round %d: %v, want DeadlineExceeded from the sweep", round, err)
						}
					})
				}
				calls.Wait()
				checkIdle(t, c)
			}
		}},
		{"abandoned", func(t *testing.T) {
			c := newClient(t, startSilentServer(t))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if _, err := c.Call(ctx, methodEcho, nil); status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("%v, want DeadlineExceeded", err)
			}
			checkIdle(t, c)
		}},
	} {
		t.Run(tc.name, tc.calls)
	}
}

func checkIdle(t *testing.T, c *Client) {
	t.Helper()
	waittest.Until(t, 5*time.Second, time.Millisecond, "no call with a deadline counted", func() bool {
		return c.deadlined.Load() == 0
	})
}
