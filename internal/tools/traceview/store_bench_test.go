package traceview

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// BenchmarkStoreAdd measures receiving exports of 512 spans (the SDK batch size) of 5-span traces, and what
// a stored span costs in heap.
func BenchmarkStoreAdd(b *testing.B) {
	const perExport = 512
	exports := make([][]byte, 64)
	for e := range exports {
		spans := make([]*tracepb.Span, perExport)
		for i := range spans {
			n := e*perExport + i
			trace := []byte(fmt.Sprintf("%016d", n/5))
			spans[i] = &tracepb.Span{TraceId: trace, SpanId: []byte(fmt.Sprintf("%08d", n%100000000)),
				Name: "storage.wait_commit", StartTimeUnixNano: uint64(n), EndTimeUnixNano: uint64(n + 1000),
				Attributes: []*commonpb.KeyValue{{Key: "cairn.member", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "member-1"}}},
					{Key: "raft.index", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(n)}}}}}
		}
		req := &collectorpb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
			Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name",
				Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "cairn-storage"}}}}},
			ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}}
		exports[e], _ = proto.Marshal(req)
	}
	store := NewStore(1 << 30)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := &collectorpb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(exports[i%len(exports)], req); err != nil {
			b.Fatal(err)
		}
		store.Add(req.GetResourceSpans())
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	spans := store.Stats().Spans
	b.ReportMetric(float64(b.N*perExport)/b.Elapsed().Seconds(), "spans/s")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(spans), "heap-bytes/span")
}

// BenchmarkAnalyze measures a report over 100,000 five-span puts, each with a linked batch span.
func BenchmarkAnalyze(b *testing.B) {
	builder := spanBuilder{epoch: time.Unix(1_700_000_000, 0)}
	traces := map[TraceID][]*Span{}
	for i := range 100_000 {
		var id TraceID
		binary.BigEndian.PutUint64(id[8:], uint64(i+1))
		at := float64(i % 100)
		spans := []*Span{withOp(builder.span(0, 1, 0, "frontend.receive", at, at+5), "put"),
			builder.span(0, 2, 1, "storage.submit", at+0.1, at+4.9), builder.span(0, 3, 2, "storage.propose", at+0.2, at+1),
			builder.span(0, 4, 2, "storage.wait_commit", at+1, at+4), builder.span(0, 5, 2, "storage.apply", at+4, at+4.8)}
		for _, s := range spans {
			s.Trace = id
		}
		batch := withLinks(builder.span(0, 1, 0, "consensus.wal_fsync", at+1.5, at+3.5), SpanRef{id, spanID(3)})
		batch.Trace = TraceID{0: 1}
		binary.BigEndian.PutUint64(batch.Trace[8:], uint64(i+1))
		traces[id] = spans
		traces[batch.Trace] = []*Span{batch}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := Analyze(traces, Options{}); r.Traces != 100_000 {
			b.Fatalf("%d traces", r.Traces)
		}
	}
	b.ReportMetric(float64(600_000*b.N)/b.Elapsed().Seconds(), "spans/s")
}
