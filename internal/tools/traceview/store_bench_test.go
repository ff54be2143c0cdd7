package traceview

import (
	"fmt"
	"runtime"
	"testing"

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
