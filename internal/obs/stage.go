package obs

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Span attribute keys of the span contract (see the package doc).
const (
	AttrOp        = attribute.Key("cairn.op")
	AttrMember    = attribute.Key("cairn.member")
	AttrService   = attribute.Key("cairn.service")
	AttrRaftIndex = attribute.Key("raft.index")
	AttrRevision  = attribute.Key("mvcc.revision")
	AttrBytes     = attribute.Key("cairn.bytes")
	AttrBatchSize = attribute.Key("cairn.batch.size")
	AttrCount     = attribute.Key("cairn.count")
)

// StageTracer starts the spans of one service's stages, named "<service>.<stage>" and tagged with cairn.service
// and cairn.member. A stage is recorded only inside a sampled trace: when ctx carries no sampled span context
// (or spans are not recorded at all), Start returns ctx and a no-op span without allocating, so a request that
// is not sampled pays one context lookup per stage. Callers build attributes only when span.IsRecording().
type StageTracer struct {
	tracer  trace.Tracer // nil when spans are not recorded
	service string
	member  string
}

// Stages returns the StageTracer of service (e.g. "storage") run by member (its member or instance name).
func (t *Telemetry) Stages(service, member string) StageTracer {
	s := StageTracer{service: service, member: member}
	if t.Recording() {
		s.tracer = t.Tracer("github.com/cairn-kv/cairn/" + service)
	}
	return s
}

// noSpan is the span of a stage that is not recorded: trace's own no-op span, returned without allocating.
func noSpan() trace.Span { return trace.SpanFromContext(context.Background()) }

// Recording reports whether the stages are recorded at all (whether spans are).
func (s StageTracer) Recording() bool { return s.tracer != nil }

// Sampled reports whether ctx carries a sampled span context and spans are recorded: whether a stage started
// under ctx would be recorded.
func (s StageTracer) Sampled(ctx context.Context) bool {
	return s.tracer != nil && trace.SpanContextFromContext(ctx).IsSampled()
}

// Start starts the stage called name under ctx's span, when that span is sampled.
func (s StageTracer) Start(ctx context.Context, name string) (context.Context, trace.Span) {
	if !s.Sampled(ctx) {
		return ctx, noSpan()
	}
	return s.tracer.Start(ctx, name, trace.WithAttributes(AttrService.String(s.service), AttrMember.String(s.member)))
}

// StartAt is Start of a stage that began at start (now when zero): for a stage measured before it was known to
// be one, or one that begins where the previous one ended, so that they tile their parent.
func (s StageTracer) StartAt(ctx context.Context, name string, start time.Time) (context.Context, trace.Span) {
	if !s.Sampled(ctx) {
		return ctx, noSpan()
	}
	if start.IsZero() {
		start = time.Now()
	}
	return s.tracer.Start(ctx, name, trace.WithTimestamp(start),
		trace.WithAttributes(AttrService.String(s.service), AttrMember.String(s.member)))
}

// Span records a stage that ran from start to end, under ctx's span when it is sampled.
func (s StageTracer) Span(ctx context.Context, name string, start, end time.Time) {
	if !s.Sampled(ctx) {
		return
	}
	_, span := s.tracer.Start(ctx, name, trace.WithTimestamp(start),
		trace.WithAttributes(AttrService.String(s.service), AttrMember.String(s.member)))
	span.End(trace.WithTimestamp(end))
}

// Batch collects the sampled requests a batched stage carries (a group commit, a WAL fsync, a shared ReadIndex
// round, a bbolt commit), to link them from the batch's span. The zero value is an empty batch; adding a
// request that is not sampled costs a context lookup and nothing else.
type Batch struct {
	links []trace.Link
	size  int
}

// Add counts one request of the batch and links it when ctx carries a sampled span context.
func (b *Batch) Add(ctx context.Context) {
	b.size++
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		b.links = append(b.links, trace.Link{SpanContext: sc})
	}
}

// AddContext counts one request of the batch and links sc when it is sampled.
func (b *Batch) AddContext(sc trace.SpanContext) {
	b.size++
	if sc.IsSampled() {
		b.links = append(b.links, trace.Link{SpanContext: sc})
	}
}

// AddCount counts n more requests of the batch, none of them sampled.
func (b *Batch) AddCount(n int) { b.size += max(n, 0) }

// Size is the number of requests counted.
func (b *Batch) Size() int { return b.size }

// Sampled reports whether the batch carries a sampled request (whether its span would be recorded).
func (b *Batch) Sampled() bool { return len(b.links) > 0 }

// Reset empties the batch, keeping its memory.
func (b *Batch) Reset() { b.links, b.size = b.links[:0], 0 }

// StartBatch starts the span of a batched stage, a root linked to every sampled request of batch (the sampler
// samples it because of them, see NewSampler), with cairn.batch.size; when batch carries no sampled request
// it returns a no-op span without allocating.
func (s StageTracer) StartBatch(name string, batch *Batch) trace.Span {
	return s.StartBatchAt(name, batch, time.Time{})
}

// StartBatchAt is StartBatch of a batch that began at start (now when start is zero).
func (s StageTracer) StartBatchAt(name string, batch *Batch, start time.Time) trace.Span {
	if s.tracer == nil || !batch.Sampled() {
		return noSpan()
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithLinks(batch.links...), trace.WithAttributes(
		AttrService.String(s.service), AttrMember.String(s.member), AttrBatchSize.Int(batch.size))}
	if !start.IsZero() {
		opts = append(opts, trace.WithTimestamp(start))
	}
	_, span := s.tracer.Start(context.Background(), name, opts...)
	return span
}

// StartRoot starts a span that begins a trace of its own (a keep-alive on a long stream, a background task),
// sampled as a root by the sampler, with cairn.op = op; link, when valid, is the span it comes from (the
// stream's). When spans are not recorded it returns ctx and a no-op span without allocating.
func (s StageTracer) StartRoot(ctx context.Context, name, op string, link trace.SpanContext) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, noSpan()
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(AttrOp.String(op),
		AttrService.String(s.service), AttrMember.String(s.member))}
	if link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link}))
	}
	return s.tracer.Start(ctx, name, opts...)
}
