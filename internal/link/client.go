package link

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Addr (host:port) and Preamble say where the link goes and how the server's port recognizes it.
	Addr, Preamble string
	// Lanes is how many connections calls are spread over (at least 1), so that one large answer holds up only
	// the calls on its own connection.
	Lanes int
	// Bound, when not 0, is the longest a call waits, whatever its context's deadline.
	Bound time.Duration
	// DialTimeout bounds the opening of a connection (1 s when 0).
	DialTimeout time.Duration
	// TLS, when not nil, secures every connection (mutual TLS; the server serves TLS.Listener); nil: plain.
	TLS *tlsconfig.Link
	// Expired is the error of a call left unanswered past its deadline (status DeadlineExceeded when nil).
	Expired error
	// DialAhead opens the connections in the background at once, so the first calls need not pay for them.
	DialAhead bool
	// Telemetry, when not nil, gives each call's sampled trace context to the server, and a span per sampled
	// call while spans are recorded, named Name + "/" + MethodNames[method].
	Telemetry   *obs.Telemetry
	Name        string
	MethodNames map[uint64]string
}

// Client sends calls to one server over a few long-lived framed connections (see the package doc).
type Client struct {
	cfg    ClientConfig
	tracer trace.Tracer // nil unless spans are recorded
	next   atomic.Uint64
	lanes  []lane

	sweepOnce sync.Once
	closeOnce sync.Once
	closed    chan struct{}
	tasks     sync.WaitGroup // the sweep and background dials

	// deadlined counts the calls waiting with a deadline, over all lanes; the sweep runs only while it is not
	// 0, and sweepWake (capacity 1) tells it that the count left 0, so an idle client sets no timer.
	deadlined atomic.Int64
	sweepWake chan struct{}
}

// NewClient returns a client for cfg; its connections open on first use (or at once with DialAhead).
func NewClient(cfg ClientConfig) *Client {
	cfg.Lanes = max(cfg.Lanes, 1)
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = time.Second
	}
	if cfg.Expired == nil {
		cfg.Expired = status.Errorf(grpccodes.DeadlineExceeded, "link to %s: no answer by the deadline", cfg.Addr)
	}
	c := &Client{cfg: cfg, lanes: make([]lane, cfg.Lanes), closed: make(chan struct{}), sweepWake: make(chan struct{}, 1)}
	if cfg.Telemetry != nil && cfg.Telemetry.Recording() {
		c.tracer = cfg.Telemetry.Tracers.Tracer("github.com/cairn-kv/cairn/internal/link")
	}
	for i := range c.lanes {
		c.lanes[i].client = c
		if cfg.DialAhead {
			c.tasks.Add(1)
			go func() {
				defer c.tasks.Done()
				_, _ = c.lanes[i].connection()
			}()
		}
	}
	return c
}

// sweepGrace is how long past its deadline a call waits for the server's own timeout answer before the sweep
// fails it; sweepInterval is how often the sweep looks while calls with deadlines wait.
const (
	sweepGrace    = time.Second
	sweepInterval = 250 * time.Millisecond
)

// Call sends body as a call of method and waits for the answer's body, which the caller owns. An error is the
// server's (a gRPC status error), the context's (as a status), or the link's; errors.Is(err, ErrNotSent) tells
// a call that certainly did not reach the server's handler.
func (c *Client) Call(ctx context.Context, method uint64, body []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	// One look for the trace context: a call that is not sampled carries none and starts no span.
	sampled := trace.SpanContextFromContext(ctx).IsSampled()
	if c.tracer != nil && sampled {
		var span trace.Span
		ctx, span = c.tracer.Start(ctx, c.spanName(method), trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("net.peer.name", c.cfg.Addr)))
		defer span.End()
		answer, err := c.call(ctx, method, body, true)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		return answer, err
	}
	return c.call(ctx, method, body, sampled)
}

// Go sends body as a call of method and returns at once; done is called once, with what Call would have
// returned, from the link's receiving goroutine (or its sweep, or the caller's own when the call was not sent),
// so it must not block. No goroutine waits for the answer. Unlike Call, an ended ctx does not abandon the call:
// it waits for its answer, its deadline (failed by the sweep) or the connection's end, and the caller tells an
// answer that came too late by its own bookkeeping.
func (c *Client) Go(ctx context.Context, method uint64, body []byte, done func(answer []byte, err error)) {
	if err := ctx.Err(); err != nil {
		done(nil, status.FromContextError(err).Err())
		return
	}
	sampled := trace.SpanContextFromContext(ctx).IsSampled()
	if c.tracer != nil && sampled {
		var span trace.Span
		ctx, span = c.tracer.Start(ctx, c.spanName(method), trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("net.peer.name", c.cfg.Addr)))
		inner := done
		done = func(answer []byte, err error) {
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
			inner(answer, err)
		}
	}
	h, deadline := c.frameHeader(ctx, method, sampled)
	l := &c.lanes[h.id%uint64(len(c.lanes))]
	if err := l.send(&h, body, waiting{done: done, deadline: deadline}); err != nil {
		done(nil, err)
	}
}

func (c *Client) spanName(method uint64) string {
	return spanName(c.cfg.Name, c.cfg.MethodNames, method)
}

// call sends the call; sampled says whether ctx carries a sampled trace context, which the frame header then
// carries.
func (c *Client) call(ctx context.Context, method uint64, body []byte, sampled bool) ([]byte, error) {
	h, deadline := c.frameHeader(ctx, method, sampled)
	l := &c.lanes[h.id%uint64(len(c.lanes))]
	ch := make(chan answer, 1)
	if err := l.send(&h, body, waiting{answer: ch, deadline: deadline}); err != nil {
		return nil, err
	}
	select {
	case a := <-ch:
		return a.body, a.err
	case <-ctx.Done():
		l.abandon(h.id)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// frameHeader is the header of a new call of method under ctx, with a fresh id, and the call's deadline (Unix
// nanoseconds, 0 for none); a call with a deadline starts the sweep.
func (c *Client) frameHeader(ctx context.Context, method uint64, sampled bool) (header, int64) {
	h := header{method: method}
	var deadline int64
	if d, ok := ctx.Deadline(); ok || c.cfg.Bound > 0 {
		now := time.Now()
		if c.cfg.Bound > 0 && (!ok || now.Add(c.cfg.Bound).Before(d)) {
			d = now.Add(c.cfg.Bound)
		}
		h.timeoutMicros = max(d.Sub(now).Microseconds(), 1)
		deadline = d.UnixNano()
		c.sweepOnce.Do(func() {
			c.tasks.Add(1)
			go c.sweep()
		})
	}
	if sampled && c.cfg.Telemetry != nil {
		h.trace = c.cfg.Telemetry.Inject(ctx)
	}
	h.id = c.next.Add(1)
	return h, deadline
}

// sweep fails the calls the server left unanswered past their deadline, until the client closes. While no
// call with a deadline waits it sleeps without a timer.
func (c *Client) sweep() {
	defer c.tasks.Done()
	tick := time.NewTicker(sweepInterval)
	defer tick.Stop()
	for {
		if c.deadlined.Load() == 0 {
			tick.Stop()
			select {
			case <-c.closed:
				return
			case <-c.sweepWake:
			}
			tick.Reset(sweepInterval)
		}
		select {
		case <-c.closed:
			return
		case now := <-tick.C:
			for i := range c.lanes {
				c.lanes[i].expire(now.Add(-sweepGrace).UnixNano())
			}
		}
	}
}

// Close ends the client's connections and waits for its goroutines; calls in flight fail with Canceled.
func (c *Client) Close() {
	c.sweepOnce.Do(func() {}) // no sweep starts after this
	c.closeOnce.Do(func() { close(c.closed) })
	for i := range c.lanes {
		c.lanes[i].close()
	}
	c.tasks.Wait()
}

// answer is what a waiting call receives: the answer's body, or the error.
type answer struct {
	body []byte
	err  error
}

// waiting is a call sent and not yet answered: where its answer goes (the channel of a Call, or the function
// of a Go), and its deadline (Unix nanoseconds, 0 for none).
type waiting struct {
	answer   chan answer
	done     func([]byte, error)
	deadline int64
}

// deliver hands a to the call's waiter. A Go's function runs here, so deliver is called without l.mu held.
func (w waiting) deliver(a answer) {
	if w.done != nil {
		w.done(a.body, a.err)
		return
	}
	w.answer <- a
}

// lane is one connection, opened on first use and again after it breaks.
type lane struct {
	client *Client

	dialMu  sync.Mutex // one dial at a time
	mu      sync.Mutex // guards the fields below
	conn    *framed.Conn
	pending map[uint64]waiting
	closed  bool
}

func (l *lane) closedError() error {
	return status.Errorf(grpccodes.Canceled, "link to %s: closed", l.client.cfg.Addr)
}

// connection returns the lane's connection, opening one if there is none (or it broke).
func (l *lane) connection() (*framed.Conn, error) {
	l.mu.Lock()
	conn, closed := l.conn, l.closed
	l.mu.Unlock()
	if closed {
		return nil, NotSent(l.closedError())
	}
	if conn != nil {
		return conn, nil
	}
	l.dialMu.Lock()
	defer l.dialMu.Unlock()
	l.mu.Lock()
	conn = l.conn
	l.mu.Unlock()
	if conn != nil {
		return conn, nil
	}
	cfg := &l.client.cfg
	conn, err := framed.Dial(cfg.Addr, cfg.Preamble, cfg.DialTimeout, cfg.TLS)
	if err != nil {
		return nil, NotSent(status.Errorf(grpccodes.Unavailable, "link to %s: dial: %v", cfg.Addr, err))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = conn.Close()
		return nil, NotSent(l.closedError())
	}
	l.conn, l.pending = conn, map[uint64]waiting{}
	l.client.tasks.Add(1)
	go l.receive(conn, l.pending)
	return conn, nil
}

// send registers the call of h and body as w and sends it, opening the connection if needed. When it returns
// nil the answer goes to w; an error is the call's (w gets nothing).
func (l *lane) send(h *header, body []byte, w waiting) error {
	head, err := appendFrameHead(make([]byte, 0, 32), h)
	if err != nil {
		return NotSent(status.Error(grpccodes.Internal, err.Error()))
	}
	conn, err := l.connection()
	if err != nil {
		return err
	}
	l.mu.Lock()
	if l.conn != conn { // it broke meanwhile: its receiver has failed what it had; this call was not sent
		l.mu.Unlock()
		return NotSent(status.Errorf(grpccodes.Unavailable, "link to %s: connection broke before the call was sent", l.client.cfg.Addr))
	}
	pending := l.pending
	l.add(pending, h.id, w)
	others := len(pending) > 1
	l.mu.Unlock()
	send := conn.Send
	if others { // calls are coming thick: let the ones about to be sent share the write
		send = conn.SendBatched
	}
	if err := send(nil, head, body); err != nil {
		l.mu.Lock()
		_, stillPending := l.take(pending, h.id)
		l.mu.Unlock()
		if !stillPending {
			return nil // the receiver failed it already
		}
		broke := status.Errorf(grpccodes.Unavailable, "link to %s: connection broke while sending: %v", l.client.cfg.Addr, err)
		if errors.Is(err, framed.ErrNotQueued) { // none of the frame went out
			return NotSent(broke)
		}
		return broke
	}
	return nil
}

// receive hands each answer to its caller until the connection ends, then fails the calls still waiting: as
// not sent after the server's end frame, as broken in flight otherwise.
func (l *lane) receive(conn *framed.Conn, pending map[uint64]waiting) {
	defer l.client.tasks.Done()
	for {
		frame, err := conn.Receive()
		var h header
		var body []byte
		if err == nil {
			if body, err = decodeFrame(frame, &h); err == nil && h.kind == kindEnd {
				err = NotSent(FromStatus(statusOf(h.status)))
				if err == nil {
					err = NotSent(status.Errorf(grpccodes.Unavailable, "link to %s: ended by the server", l.client.cfg.Addr))
				}
			}
		}
		if err != nil {
			if _, ok := status.FromError(err); !ok {
				err = status.Errorf(grpccodes.Unavailable, "link to %s: %v", l.client.cfg.Addr, err)
			}
			l.mu.Lock()
			if l.conn == conn {
				l.conn = nil
			}
			_ = conn.Close()
			failed := make([]waiting, 0, len(pending))
			for id, w := range pending {
				failed = append(failed, w)
				l.take(pending, id)
			}
			l.mu.Unlock()
			for _, w := range failed {
				w.deliver(answer{err: err})
			}
			return
		}
		if h.kind != kindAnswer {
			continue
		}
		l.mu.Lock()
		w, ok := l.take(pending, h.id)
		l.mu.Unlock()
		if ok {
			if h.status != nil {
				w.deliver(answer{err: FromStatus(statusOf(h.status))})
			} else {
				w.deliver(answer{body: body})
			}
		}
	}
}

// abandon forgets a call whose caller stopped waiting and tells the server to cancel it.
func (l *lane) abandon(id uint64) {
	l.mu.Lock()
	conn := l.conn
	_, pending := l.take(l.pending, id)
	l.mu.Unlock()
	if pending && conn != nil {
		cancelAt(conn, id)
	}
}

// expire fails the calls whose deadline is before limit (Unix nanoseconds) and tells the server to cancel them.
func (l *lane) expire(limit int64) {
	l.mu.Lock()
	conn := l.conn
	var expired []uint64
	var failed []waiting
	for id, w := range l.pending {
		if w.deadline != 0 && w.deadline < limit {
			failed = append(failed, w)
			l.take(l.pending, id)
			expired = append(expired, id)
		}
	}
	l.mu.Unlock()
	for _, w := range failed {
		w.deliver(answer{err: l.client.cfg.Expired})
	}
	for _, id := range expired {
		if conn != nil {
			cancelAt(conn, id)
		}
	}
}

// add registers w as call id in pending; l.mu is held.
func (l *lane) add(pending map[uint64]waiting, id uint64, w waiting) {
	pending[id] = w
	if w.deadline != 0 && l.client.deadlined.Add(1) == 1 {
		select {
		case l.client.sweepWake <- struct{}{}:
		default:
		}
	}
}

// take removes call id from pending and returns it, if it was there; l.mu is held.
func (l *lane) take(pending map[uint64]waiting, id uint64) (waiting, bool) {
	w, ok := pending[id]
	if ok {
		delete(pending, id)
		if w.deadline != 0 {
			l.client.deadlined.Add(-1)
		}
	}
	return w, ok
}

// cancelAt tells the server to cancel call id on conn; a broken connection shows in receive.
func cancelAt(conn *framed.Conn, id uint64) {
	if head, err := appendFrameHead(nil, &header{id: id, kind: kindCancel}); err == nil {
		_ = conn.Send(nil, head)
	}
}

func (l *lane) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.conn != nil {
		_ = l.conn.Close()
		l.conn = nil
	}
}
