package link

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/obs"
)

// defaultMaxWorkers bounds the worker goroutines a connection keeps when ServerConfig.MaxWorkers is 0.
const defaultMaxWorkers = 4096

// defaultWorkerIdle is how long a kept worker waits for a call before it exits, when ServerConfig.WorkerIdle is 0.
const defaultWorkerIdle = 5 * time.Second

// ServerConfig configures a Server.
type ServerConfig struct {
	// Bound, when not 0, is the longest a call's context runs, whatever the caller's deadline.
	Bound time.Duration
	// MaxWorkers bounds the worker goroutines a connection keeps (4096 when 0). A call run with Call.Go that
	// finds no idle worker starts one, which stays until idle for WorkerIdle, so the pool grows to the
	// connection's concurrency and calls run on stacks already grown.
	MaxWorkers int
	// WorkerIdle is how long a kept worker waits for a call before it exits (5 s when 0), so that the stacks a
	// burst of calls grew do not stay after it (a storage kept ~1,100 after etcd's benchmark of 1000 clients).
	WorkerIdle time.Duration
	// BriefWorkers bounds the workers a connection keeps for Call.GoBrief (GOMAXPROCS when 0); they stay until
	// the connection ends.
	BriefWorkers int
	// End is the error of the end frame a stopping server sends (Unavailable when nil); it is marked NotSent.
	End error
	// Linger bounds how long a stopping server waits for the client to close a connection it ended (2 s when 0).
	Linger time.Duration
	// Telemetry, when not nil, restores each call's trace context as its context's parent, and records a span
	// per sampled call (named Name + "/" + MethodNames[method]) while spans are recorded.
	Telemetry   *obs.Telemetry
	Name        string
	MethodNames map[uint64]string
	Logger      *slog.Logger
}

// Handler takes one call, on the connection's receiving goroutine. It answers it (Call.Reply, Call.Fail) at
// once, runs it on a worker (Call.Go), or answers it later from elsewhere under Call.Context. Every call must be
// answered once.
type Handler func(call *Call)

// Server dispatches the calls of the connections it serves to the handlers of their methods.
type Server struct {
	cfg      ServerConfig
	tracer   trace.Tracer // nil unless spans are recorded
	handlers map[uint64]Handler
}

// NewServer returns a server for cfg with no methods; add them with Handle before serving.
func NewServer(cfg ServerConfig) *Server {
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = defaultMaxWorkers
	}
	if cfg.BriefWorkers <= 0 {
		cfg.BriefWorkers = runtime.GOMAXPROCS(0)
	}
	if cfg.WorkerIdle <= 0 {
		cfg.WorkerIdle = defaultWorkerIdle
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.End == nil {
		cfg.End = status.Errorf(grpccodes.Unavailable, "%s: stopping", cfg.Name)
	}
	s := &Server{cfg: cfg, handlers: map[uint64]Handler{}}
	if cfg.Telemetry != nil && cfg.Telemetry.Recording() {
		s.tracer = cfg.Telemetry.Tracers.Tracer("github.com/cairn-kv/cairn/internal/link")
	}
	return s
}

// Handle sets the handler of method.
func (s *Server) Handle(method uint64, h Handler) { s.handlers[method] = h }

// Serve serves the calls of conn until it ends or stopping closes. Once stopping, no call starts; when those
// started are answered, the connection ends with an end frame (the client then knows every call left was not
// started) and Serve returns once the client closed its side, or after Linger. Calls still running when the
// connection ends have their contexts cancelled; Serve waits for the workers it started.
func (s *Server) Serve(conn *framed.Conn, stopping <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	ss := &session{server: s, ctx: ctx, conn: conn, stopping: stopping, calls: map[uint64]*Call{},
		work: make(chan func()), brief: make(chan func(), briefQueue), flush: make(chan struct{}, 1)}
	ended := make(chan struct{})
	go func() { defer close(ended); ss.receive() }()
	flusherDone := make(chan struct{})
	go func() { defer close(flusherDone); ss.flusher(ended) }()
	select {
	case <-ended:
	case <-stopping:
		ss.mu.Lock()
		ss.stopped = true // from here on no call starts, so every unanswered one was not started
		ss.mu.Unlock()
		ss.active.Wait()
		if head, err := appendFrameHead(nil, &header{kind: kindEnd, status: status.Convert(NotSent(s.cfg.End)).Proto()}); err == nil {
			_ = conn.Send(nil, head)
		}
		// receive drops what still comes until the client, having read the end, closes its side.
		conn.CloseWrite(s.cfg.Linger)
		<-ended
	}
	cancel()
	ss.stop()
	<-flusherDone
	_ = conn.Close()
}

// session is the state of one served connection.
type session struct {
	server   *Server
	ctx      context.Context // ends with the connection
	conn     *framed.Conn
	stopping <-chan struct{}
	work     chan func()
	brief    chan func()   // Call.GoBrief's queue, taken by the brief workers
	flush    chan struct{} // an answer was queued from outside the connection's goroutines

	mu      sync.Mutex
	calls   map[uint64]*Call // calls with a context, by id, for cancelling
	stopped bool
	active  sync.WaitGroup // calls dispatched and not yet answered
	workers sync.WaitGroup // worker goroutines
	running atomic.Int64   // calls dispatched and not yet answered
	kept    atomic.Int64   // worker goroutines kept
	briefs  atomic.Int64   // brief workers started
}

// briefQueue is how many calls Call.GoBrief queues for a connection's brief workers before the receiving
// goroutine waits for room (back-pressure on the connection).
const briefQueue = 256

// receive dispatches each call of the connection until it ends; once stopping, calls are dropped (the end
// frame tells the client they were not started). The answers given on this goroutine wait, while more calls
// have already arrived, for the write that carries the last one's.
func (ss *session) receive() {
	for {
		if ss.conn.Buffered() == 0 {
			_ = ss.conn.Flush()
		}
		frame, err := ss.conn.Receive()
		if err != nil {
			return
		}
		var h header
		body, err := decodeFrame(frame, &h)
		if err != nil {
			ss.server.cfg.Logger.Warn("link frame not decodable; closing the connection", "link", ss.server.cfg.Name, "err", err)
			return
		}
		select {
		case <-ss.stopping:
			continue
		default:
		}
		switch h.kind {
		case kindCancel:
			ss.cancel(h.id)
		case kindCall:
			ss.dispatch(&h, body)
		}
	}
}

func (ss *session) dispatch(h *header, body []byte) {
	call := &Call{ID: h.id, Method: h.method, Body: body, session: ss, trace: h.trace, timeoutMicros: h.timeoutMicros}
	ss.mu.Lock()
	if ss.stopped {
		ss.mu.Unlock()
		return
	}
	ss.active.Add(1)
	ss.mu.Unlock()
	ss.running.Add(1)
	handler, ok := ss.server.handlers[h.method]
	if !ok {
		call.inline.Store(true)
		call.Fail(status.Errorf(grpccodes.Unimplemented, "%s: no method %d", ss.server.cfg.Name, h.method))
		return
	}
	call.inline.Store(true)
	handler(call)
	call.inline.Store(false)
}

// flusher writes the answers queued from goroutines of other owners (Call.Reply outside a handler or worker),
// so those never write to the network themselves.
func (ss *session) flusher(ended <-chan struct{}) {
	for {
		select {
		case <-ended:
			return
		case <-ss.flush:
			_ = ss.conn.Flush()
		}
	}
}

func (ss *session) cancel(id uint64) {
	ss.mu.Lock()
	call := ss.calls[id]
	ss.mu.Unlock()
	if call != nil {
		call.cancel()
	}
}

// worker runs the calls handed to it until the connection stops or none comes for WorkerIdle.
func (ss *session) worker() {
	defer ss.workers.Done()
	idle := time.NewTimer(ss.server.cfg.WorkerIdle)
	defer idle.Stop()
	for {
		select {
		case f, ok := <-ss.work:
			if !ok {
				return
			}
			f()
			idle.Reset(ss.server.cfg.WorkerIdle)
		case <-idle.C:
			ss.kept.Add(-1) // a call finding no worker starts one (Call.Go), so none waits for this one
			return
		}
	}
}

// newWorker runs first, then stays as a worker unless the connection already keeps MaxWorkers.
func (ss *session) newWorker(first func()) {
	first()
	if ss.kept.Add(1) > int64(ss.server.cfg.MaxWorkers) {
		ss.kept.Add(-1)
		ss.workers.Done()
		return
	}
	ss.worker()
}

// stop cancels the calls still running, waits for those on workers and ends the workers.
func (ss *session) stop() {
	ss.mu.Lock()
	ss.stopped = true
	for _, call := range ss.calls {
		call.cancel()
	}
	ss.mu.Unlock()
	close(ss.work)
	close(ss.brief)
	ss.workers.Wait()
}

// briefWorker runs the calls of Call.GoBrief until the connection stops.
func (ss *session) briefWorker() {
	defer ss.workers.Done()
	for f := range ss.brief {
		f()
	}
}

// Call is one call a Handler takes.
type Call struct {
	// ID and Method name the call; Body is its encoded request, which the handler may keep.
	ID, Method uint64
	Body       []byte

	session       *session
	trace         map[string]string
	timeoutMicros int64
	inline        atomic.Bool // the handler is running on the receiving goroutine
	onWorker      atomic.Bool // the call runs on a worker
	ctx           context.Context
	cancel        context.CancelFunc
	span          trace.Span
	answered      atomic.Bool
}

// Traced reports whether the caller sent a trace context.
func (c *Call) Traced() bool { return len(c.trace) > 0 }

// Context is the call's context, made on first use: bounded by the caller's remaining deadline and the
// server's Bound, cancelled when the caller abandons the call or the connection ends, and carrying the caller's
// trace context (and the call's span while spans are recorded). A call answered on the spot never needs one.
func (c *Call) Context() context.Context {
	if c.ctx != nil {
		return c.ctx
	}
	ss := c.session
	ctx := ss.ctx
	if tel := ss.server.cfg.Telemetry; tel != nil {
		ctx = tel.Extract(ctx, c.trace)
	}
	if ss.server.tracer != nil && len(c.trace) > 0 && trace.SpanContextFromContext(ctx).IsSampled() {
		ctx, c.span = ss.server.tracer.Start(ctx, spanName(ss.server.cfg.Name, ss.server.cfg.MethodNames, c.Method),
			trace.WithSpanKind(trace.SpanKindServer))
	}
	timeout := ss.server.cfg.Bound
	if c.timeoutMicros > 0 {
		if d := time.Duration(c.timeoutMicros) * time.Microsecond; timeout == 0 || d < timeout {
			timeout = d
		}
	}
	if timeout > 0 {
		c.ctx, c.cancel = context.WithTimeout(ctx, timeout)
	} else {
		c.ctx, c.cancel = context.WithCancel(ctx)
	}
	ss.mu.Lock()
	ss.calls[c.ID] = c
	ss.mu.Unlock()
	return c.ctx
}

// ConnContext is the connection's context, for a call answered on the spot (which needs no deadline of its
// own): it ends when the connection ends. It carries the caller's trace context, and the call's span while
// spans are recorded, when the caller sent one; so a traced call is answered on the spot as an untraced one is,
// by the same goroutine, and only its context differs.
func (c *Call) ConnContext() context.Context {
	ss := c.session
	if len(c.trace) == 0 || c.ctx != nil {
		return ss.ctx
	}
	ctx := ss.ctx
	if tel := ss.server.cfg.Telemetry; tel != nil {
		ctx = tel.Extract(ctx, c.trace)
	}
	if ss.server.tracer != nil && c.span == nil && trace.SpanContextFromContext(ctx).IsSampled() {
		ctx, c.span = ss.server.tracer.Start(ctx, spanName(ss.server.cfg.Name, ss.server.cfg.MethodNames, c.Method),
			trace.WithSpanKind(trace.SpanKindServer))
	}
	return ctx
}

// Timeout is what remained of the caller's deadline when it sent the call; 0 when it had none.
func (c *Call) Timeout() time.Duration { return time.Duration(c.timeoutMicros) * time.Microsecond }

// Go runs f with the call's context on one of the connection's workers; f answers the call, or has it answered
// later from elsewhere (as a storage write is, from the apply loop). Only the handler calls Go, before it
// returns.
func (c *Call) Go(f func(ctx context.Context)) {
	ctx := c.Context()
	ss := c.session
	run := func() {
		c.onWorker.Store(true)
		f(ctx)
		c.onWorker.Store(false) // an answer given later comes from another owner's goroutine (see answer)
	}
	select {
	case ss.work <- run:
	default:
		ss.workers.Add(1)
		go ss.newWorker(run)
	}
}

// GoBrief is Go for f that never waits long (it may hand the answer to someone else, as a storage write is
// answered by the apply loop): f runs on one of a few workers the connection keeps (ServerConfig.BriefWorkers)
// instead of a worker of its own, so a burst of such calls does not grow a goroutine, and a stack, per call.
// When the workers are behind by more than a queue's worth, the receiving goroutine waits for them. Only the
// handler calls GoBrief, before it returns.
func (c *Call) GoBrief(f func(ctx context.Context)) {
	ctx := c.Context()
	ss := c.session
	if ss.briefs.Load() < int64(ss.server.cfg.BriefWorkers) {
		ss.briefs.Add(1) // only the receiving goroutine starts brief workers
		ss.workers.Add(1)
		go ss.briefWorker()
	}
	ss.brief <- func() {
		c.onWorker.Store(true)
		f(ctx)
		c.onWorker.Store(false)
	}
}

// Reply answers the call with body, made of parts written in order. Parts larger than a few kilobytes are
// written in place and release (when not nil) is called once they are written or dropped, as framed.Conn.Send
// does.
func (c *Call) Reply(release func(), body ...[]byte) {
	c.answer(&header{id: c.ID, kind: kindAnswer}, release, body)
}

// Fail answers the call with err's gRPC status; an error marked NotSent stays marked for the caller.
func (c *Call) Fail(err error) {
	var st *spb.Status
	if err == nil {
		st = status.New(grpccodes.Unknown, "link: call failed without an error").Proto()
	} else {
		st = status.Convert(err).Proto()
	}
	if c.span != nil {
		c.span.SetStatus(codes.Error, st.GetMessage())
	}
	c.answer(&header{id: c.ID, kind: kindAnswer, status: st}, nil, nil)
}

func (c *Call) answer(h *header, release func(), body [][]byte) {
	if !c.answered.CompareAndSwap(false, true) {
		if release != nil {
			release()
		}
		return
	}
	ss := c.session
	if c.cancel != nil {
		ss.mu.Lock()
		delete(ss.calls, c.ID)
		ss.mu.Unlock()
		c.cancel()
	}
	if c.span != nil {
		c.span.End()
	}
	head, err := appendFrameHead(make([]byte, 0, 16+len(h.trace)), h)
	if err != nil {
		ss.server.cfg.Logger.Warn("link answer not encodable", "link", ss.server.cfg.Name, "err", err)
		head, _ = appendFrameHead(nil, &header{id: c.ID, kind: kindAnswer, status: status.New(grpccodes.Internal, err.Error()).Proto()})
		release, body = nil, nil
	}
	parts := append(make([][]byte, 0, 1+len(body)), head)
	parts = append(parts, body...)
	switch {
	case c.inline.Load():
		_ = ss.conn.Queue(release, parts...)
	case !c.onWorker.Load(): // another owner's goroutine (a raft loop callback): the flusher writes it
		_ = ss.conn.Queue(release, parts...)
		select {
		case ss.flush <- struct{}{}:
		default:
		}
	case ss.running.Load() > 1 || ss.conn.Buffered() > 0:
		_ = ss.conn.SendBatched(release, parts...)
	default:
		_ = ss.conn.Send(release, parts...)
	}
	ss.running.Add(-1)
	ss.active.Done()
}

func spanName(name string, methods map[uint64]string, method uint64) string {
	if n, ok := methods[method]; ok {
		return name + "/" + n
	}
	return name + "/" + strconv.FormatUint(method, 10)
}
