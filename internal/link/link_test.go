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

	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

const testPreamble = "CAIRN-LINK-TEST/1\n"

// Test methods.
const (
	methodEcho    = 1 // answers the body at once, on the receiving goroutine
	methodWorker  = 2 // answers the body from a worker
	methodRefuse  = 3 // refuses as storage does when unhealthy: not sent
	methodBlock   = 4 // waits until released or its context ends
	methodLater   = 5 // answered from another goroutine, under Call.Context
	methodBrief   = 6 // answers the body from a brief worker
	methodUnknown = 9
)

// testServer is a link server on loopback.
type testServer struct {
	addr     string
	stopping chan struct{}
	release  chan struct{}
	started  chan uint64 // ids of methodBlock calls as they start
	ended    chan error  // why each methodBlock call ended (nil: released)
	lis      net.Listener
	conns    sync.WaitGroup
	mu       sync.Mutex
	served   []*framed.Conn
}

func startServer(t testing.TB) *testServer { t.Helper(); return startServerWith(t, nil) }

// startServerWith is startServer serving TLS with secure (plain when nil).
func startServerWith(t testing.TB, secure *tlsconfig.Link) *testServer {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := secure.Listener(raw, "test")
	ts := &testServer{addr: lis.Addr().String(), stopping: make(chan struct{}), release: make(chan struct{}),
		started: make(chan uint64, 16), ended: make(chan error, 16), lis: lis}
	srv := NewServer(ServerConfig{Name: "test", Bound: 10 * time.Second})
	srv.Handle(methodEcho, func(c *Call) { c.Reply(nil, c.Body) })
	srv.Handle(methodWorker, func(c *Call) { c.Go(func(context.Context) { c.Reply(nil, []byte("w:"), c.Body) }) })
	srv.Handle(methodBrief, func(c *Call) { c.GoBrief(func(context.Context) { c.Reply(nil, []byte("b:"), c.Body) }) })
	srv.Handle(methodRefuse, func(c *Call) {
		c.Fail(NotSent(status.Error(codes.Unavailable, "cairn storage unavailable: store failed")))
	})
	srv.Handle(methodBlock, func(c *Call) {
		c.Go(func(ctx context.Context) {
			ts.started <- c.ID
			select {
			case <-ts.release:
				ts.ended <- nil
				c.Reply(nil, []byte("released"))
			case <-ctx.Done():
				ts.ended <- ctx.Err()
				c.Fail(status.FromContextError(ctx.Err()).Err())
			}
		})
	})
	srv.Handle(methodLater, func(c *Call) {
		ctx := c.Context()
		go func() { // an owner outside the link, as raft's loop acknowledging a proposal
			_ = ctx
			c.Reply(nil, []byte("later"))
		}()
	})
	ts.conns.Add(1)
	go func() {
		defer ts.conns.Done()
		for {
			nc, err := lis.Accept()
			if err != nil {
				return
			}
			conn, err := framed.Accept(nc, nil, testPreamble, 5*time.Second)
			if err != nil {
				continue
			}
			ts.mu.Lock()
			ts.served = append(ts.served, conn)
			ts.mu.Unlock()
			ts.conns.Add(1)
			go func() { defer ts.conns.Done(); srv.Serve(conn, ts.stopping) }()
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		ts.breakAll()
		ts.conns.Wait()
	})
	return ts
}

// breakAll breaks every served connection, as a crashed server would.
func (ts *testServer) breakAll() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, c := range ts.served {
		_ = c.Close()
	}
}

func newClient(t *testing.T, addr string) *Client {
	t.Helper()
	c := NewClient(ClientConfig{Addr: addr, Preamble: testPreamble, Lanes: 1, Name: "test"})
	t.Cleanup(c.Close)
	return c
}

func TestCallsAnswer(t *testing.T) {
	ts := startServer(t)
	c := newClient(t, ts.addr)
	for _, tc := range []struct {
		name   string
		method uint64
		want   string
		code   codes.Code
	}{
		{"on the receiving goroutine", methodEcho, "ping", codes.OK},
		{"on a worker", methodWorker, "w:ping", codes.OK},
		{"on a brief worker", methodBrief, "b:ping", codes.OK},
		{"from another owner", methodLater, "later", codes.OK},
		{"unknown method", methodUnknown, "", codes.Unimplemented},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Call(context.Background(), tc.method, []byte("ping"))
			if status.Code(err) != tc.code || string(got) != tc.want {
				t.Fatalf("Call = %q, %v; want %q, code %v", got, err, tc.want, tc.code)
			}
			if errors.Is(err, ErrNotSent) {
				t.Fatalf("answered call marked not sent: %v", err)
			}
		})
	}
}

// TestNotSentMarking covers every way a call fails, and which of them mark it not sent.
func TestNotSentMarking(t *testing.T) {
	for _, tc := range []struct {
		name        string
		run         func(t *testing.T) error
		wantNotSent bool
		code        codes.Code
	}{
		{"dial failure", func(t *testing.T) error {
			lis, _ := net.Listen("tcp", "127.0.0.1:0")
			addr := lis.Addr().String()
			_ = lis.Close()
			_, err := newClient(t, addr).Call(context.Background(), methodEcho, nil)
			return err
		}, true, codes.Unavailable},
		{"broke before send", func(t *testing.T) error {
			ts := startServer(t)
			c := newClient(t, ts.addr)
			conn, err := framed.Dial(ts.addr, testPreamble, time.Second, nil)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.Close() // broken, and the lane (which has no receiver on it) not yet told
			l := &c.lanes[0]
			l.mu.Lock()
			l.conn, l.pending = conn, map[uint64]waiting{}
			l.mu.Unlock()
			_, err = c.Call(context.Background(), methodEcho, nil)
			return err
		}, true, codes.Unavailable},
		{"health refusal", func(t *testing.T) error {
			ts := startServer(t)
			_, err := newClient(t, ts.addr).Call(context.Background(), methodRefuse, nil)
			if st := status.Convert(err); st.Message() != "cairn storage unavailable: store failed" {
				t.Errorf("message %q changed", st.Message())
			}
			return err
		}, true, codes.Unavailable},
		{"end frame", func(t *testing.T) error {
			ts := startServer(t)
			c := newClient(t, ts.addr)
			first := make(chan error, 1)
			go func() { _, err := c.Call(context.Background(), methodBlock, nil); first <- err }()
			<-ts.started
			close(ts.stopping) // the blocked call is answered; the next is never started
			second := make(chan error, 1)
			go func() { _, err := c.Call(context.Background(), methodBlock, nil); second <- err }()
			waittest.Until(t, 5*time.Second, time.Millisecond, "the second call is pending", func() bool {
				c.lanes[0].mu.Lock()
				defer c.lanes[0].mu.Unlock()
				return len(c.lanes[0].pending) == 2
			})
			close(ts.release)
			if err := <-first; err != nil {
				t.Errorf("the started call: %v, want its answer", err)
			}
			return <-second
		}, true, codes.Unavailable},
		{"broke after send", func(t *testing.T) error {
			ts := startServer(t)
			c := newClient(t, ts.addr)
			done := make(chan error, 1)
			go func() { _, err := c.Call(context.Background(), methodBlock, nil); done <- err }()
			<-ts.started
			ts.breakAll()
			return <-done
		}, false, codes.Unavailable},
		{"deadline", func(t *testing.T) error {
			ts := startServer(t)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := newClient(t, ts.addr).Call(ctx, methodBlock, nil)
			if ended := <-ts.ended; ended == nil {
				t.Error("the server's call outlived the caller's deadline")
			}
			return err
		}, false, codes.DeadlineExceeded},
		{"cancel", func(t *testing.T) error {
			ts := startServer(t)
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-ts.started; cancel() }()
			_, err := newClient(t, ts.addr).Call(ctx, methodBlock, nil)
			if ended := <-ts.ended; !errors.Is(ended, context.Canceled) {
				t.Errorf("the server's call ended with %v, want it cancelled", ended)
			}
			return err
		}, false, codes.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run(t)
			if err == nil {
				t.Fatal("the call succeeded")
			}
			if got := errors.Is(err, ErrNotSent); got != tc.wantNotSent {
				t.Fatalf("errors.Is(%v, ErrNotSent) = %v, want %v", err, got, tc.wantNotSent)
			}
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, err, tc.code)
			}
			if tc.wantNotSent && !hasNotSentDetail(status.Convert(err)) {
				t.Fatalf("%v: the mark would not cross gRPC", err)
			}
		})
	}
}

func TestPlainDropsTheMark(t *testing.T) {
	err := NotSent(status.Error(codes.Unavailable, "x"))
	plain := Plain(err)
	if errors.Is(plain, ErrNotSent) || len(status.Convert(plain).Details()) != 0 || status.Convert(plain).Message() != "x" {
		t.Fatalf("Plain(%v) = %v", err, plain)
	}
}

// startBenchServer starts a test server for a benchmark and returns its address.
func startBenchServer(b *testing.B, secure *tlsconfig.Link) string {
	return startServerWith(b, secure).addr
}

// TestWorkersRetireWhenIdle: the workers a burst of calls started stay while calls keep coming and exit once
// none came for WorkerIdle; a stopping connection ends those left at once.
func TestWorkersRetireWhenIdle(t *testing.T) {
	for _, tc := range []struct {
		name string
		idle time.Duration
		want int64 // workers kept after the burst, once the idle time has passed many times over
	}{
		{"idle workers exit", 20 * time.Millisecond, 0},
		{"busy within the idle time they stay", time.Hour, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss := &session{server: NewServer(ServerConfig{Name: "test", WorkerIdle: tc.idle}), work: make(chan func()),
				brief: make(chan func())}
			var running sync.WaitGroup
			release := make(chan struct{})
			for range 8 { // as Call.Go does when no worker is idle
				running.Add(1)
				ss.workers.Add(1)
				go ss.newWorker(func() { running.Done(); <-release })
			}
			running.Wait()
			close(release)
			waittest.Until(t, 5*time.Second, time.Millisecond, "the burst's workers to be kept", func() bool {
				return ss.kept.Load() == 8 || tc.want == 0
			})
			if tc.want == 0 {
				waittest.Until(t, 5*time.Second, 5*time.Millisecond, "idle workers to exit", func() bool { return ss.kept.Load() == 0 })
			} else {
				done := make(chan struct{})
				ss.work <- func() { close(done) } // an idle worker takes it
				<-done
				if got := ss.kept.Load(); got != tc.want {
					t.Fatalf("%d workers kept, want %d", got, tc.want)
				}
			}
			ss.stop() // closes the work channel and waits for every worker
		})
	}
}

// TestBriefWorkersStayFew checks that a burst of calls run with GoBrief runs them all on no more than
// BriefWorkers goroutines, and that stopping the connection ends them.
func TestBriefWorkersStayFew(t *testing.T) {
	const calls, workers = 500, 2
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss := &session{server: NewServer(ServerConfig{Name: "test", BriefWorkers: workers}), ctx: ctx,
		calls: map[uint64]*Call{}, work: make(chan func()), brief: make(chan func(), briefQueue)}
	var ran sync.WaitGroup
	ran.Add(calls)
	for id := range uint64(calls) { // as the receiving goroutine dispatches them
		call := &Call{ID: id, session: ss}
		call.GoBrief(func(ctx context.Context) {
			if ctx.Err() != nil {
				t.Errorf("call %d ran with an ended context: %v", id, ctx.Err())
			}
			ran.Done()
		})
	}
	ran.Wait()
	if got := ss.briefs.Load(); got != workers {
		t.Fatalf("%d brief workers started for %d calls, want %d", got, calls, workers)
	}
	ss.stop() // closes the queues and waits for every worker
}
