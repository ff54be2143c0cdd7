package frontend_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/testing/clustertest"
)

// TestOneTraceFollowsAWrite: a client's Put is one trace from the frontend's gRPC span through the storage's
// Submit (a call on the storage pipeline, with a link span on both ends), the
// proposal on consensus (carried on the propose link), every member's apply (carried in the log entry) and the
// watchhub's delivery to a watcher (carried on NATS), as separate processes wire them. The client is etcd's
// own, untraced: the frontend starts the trace.
func TestOneTraceFollowsAWrite(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tel := &obs.Telemetry{
		Tracers:    sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)),
		Propagator: propagation.TraceContext{},
	}
	c := clustertest.Start(t, clustertest.Options{Members: 3, Frontends: 1, Watchhubs: 1, Telemetry: tel})
	client := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watch := client.Watch(ctx, "traced")
	if _, err := client.Put(ctx, "traced", "v"); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-watch:
		if len(resp.Events) != 1 {
			t.Fatalf("watch response %+v, want the put", resp)
		}
	case <-ctx.Done():
		t.Fatal("the watcher saw no event")
	}

	var named map[string]int // span name -> count in the put's trace
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		named = spansInTraceOf(recorder.Ended(), "etcdserverpb.KV/Put")
		if named["consensus.Propose"] == 1 && named["storage.apply"] == 3 && named["watchhub.deliver"] == 1 {
			return
		}
	}
	t.Fatalf("spans in the put's trace: %v, want one consensus.Propose, three storage.apply (one per member) "+
		"and one watchhub.deliver", named)
}

// spansInTraceOf counts the spans, by name, in the trace of the server span called root.
func spansInTraceOf(spans []sdktrace.ReadOnlySpan, root string) map[string]int {
	var traceID trace.TraceID
	for _, s := range spans {
		if s.Name() == root && s.SpanKind() == trace.SpanKindServer {
			traceID = s.SpanContext().TraceID()
		}
	}
	named := map[string]int{}
	for _, s := range spans {
		if traceID.IsValid() && s.SpanContext().TraceID() == traceID {
			named[s.Name()]++
		}
	}
	return named
}
