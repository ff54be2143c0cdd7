package watchhub

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/mem"

	"github.com/cairn-kv/cairn/internal/obs"
)

// eventTrace is the trace of one sampled watch event (the span contract in internal/obs): a root span
// watchhub.event (cairn.op=watch.event) linked to the write's storage.apply span, whose trace context came on the
// bus, from the hub's receipt of the record to the last watcher's send. Its stages: watchhub.bus_receive (the
// record's wait for the feed), watchhub.sequence (until its revision is next in order), watchhub.match,
// watchhub.encode (encoding the matching groups' responses) and watchhub.send (from the encoded response to
// written, per watcher, its queueing on the streams included). Only revisions whose record carried a sampled trace context get one.
type eventTrace struct {
	ctx     context.Context // carries the root span
	root    trace.Span
	offered time.Time // when the feed offered the revision to the sequencer
	pending atomic.Int32
	end     atomic.Int64 // the latest end of a stage (a send), in Unix nanoseconds: the root's end
	// relay is the root's trace carrier (obs.AppendRelayTrace), written before the event's frames on the
	// streams of frontends that asked for it, so that the frontend spans its relay hop in this trace.
	relay mem.Buffer
}

// startEvent starts the trace of a record received at received whose apply span's context is carried (nil
// when the record carried none, or spans are not recorded).
func (h *Hub) startEvent(carried map[string]string, rev int64, received time.Time) *eventTrace {
	if len(carried) == 0 || !h.stages.Sampled(h.tel.Extract(context.Background(), carried)) {
		return nil
	}
	var apply obs.Batch
	apply.Add(h.tel.Extract(context.Background(), carried))
	root := h.stages.StartBatchAt("watchhub.event", &apply, received)
	root.SetAttributes(obs.AttrOp.String("watch.event"), obs.AttrRevision.Int64(rev))
	t := &eventTrace{ctx: trace.ContextWithSpan(context.Background(), root), root: root, offered: time.Now(),
		relay: mem.SliceBuffer(obs.AppendRelayTrace(nil, root.SpanContext()))}
	t.pending.Store(1) // the fan-out's own hold
	h.stages.Span(t.ctx, "watchhub.bus_receive", received, t.offered)
	return t
}

// hold adds n sends the root waits for.
func (t *eventTrace) hold(n int) {
	if t != nil {
		t.pending.Add(int32(n))
	}
}

// ended notes a stage that ended at end.
func (t *eventTrace) ended(end time.Time) {
	for {
		last := t.end.Load()
		if end.UnixNano() <= last || t.end.CompareAndSwap(last, end.UnixNano()) {
			return
		}
	}
}

// release ends one hold; the last ends the root span, when its last stage ended.
func (t *eventTrace) release() {
	if t != nil && t.pending.Add(-1) == 0 {
		t.root.End(trace.WithTimestamp(time.Unix(0, t.end.Load())))
	}
}

// context is the root span's context, or a context without a span when t is nil (its stages then record
// nothing).
func (t *eventTrace) context() context.Context {
	if t == nil {
		return context.Background()
	}
	return t.ctx
}
