package obs

import (
	"bytes"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
)

// TestRelayTraceCarrier: a frame with the carrier gives back the span context and exactly the frame without
// it; a frame without one (any etcd WatchResponse) is left alone; a carrier cut short is no carrier.
func TestRelayTraceCarrier(t *testing.T) {
	frame, err := proto.Marshal(&pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 7}, WatchId: 3,
		Events: []*mvccpb.Event{{Kv: &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v")}}}})
	if err != nil {
		t.Fatal(err)
	}
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
		TraceFlags: trace.FlagsSampled})
	carried := append(AppendRelayTrace(nil, sampled), frame...)
	tests := []struct {
		name     string
		msg      []byte
		wantOK   bool
		wantRest []byte
	}{
		{"carrier", carried, true, frame},
		{"no carrier", frame, false, frame},
		{"empty", nil, false, nil},
		{"cut short", carried[:10], false, carried[:10]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, rest, ok := CutRelayTrace(tt.msg)
			if ok != tt.wantOK || !bytes.Equal(rest, tt.wantRest) {
				t.Fatalf("CutRelayTrace = %v, %x, want %v, %x", ok, rest, tt.wantOK, tt.wantRest)
			}
			if ok && (sc.TraceID() != sampled.TraceID() || sc.SpanID() != sampled.SpanID() || !sc.IsSampled() || !sc.IsRemote()) {
				t.Errorf("span context %v, want %v (remote)", sc, sampled)
			}
		})
	}
	// A client that got the carrier anyway would decode the frame it was given, the carrier an unknown field.
	var resp pb.WatchResponse
	if err := proto.Unmarshal(carried, &resp); err != nil || resp.WatchId != 3 || len(resp.Events) != 1 {
		t.Errorf("frame with carrier decodes as %v, %v", &resp, err)
	}
}
