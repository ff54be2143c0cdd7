package storage

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/api/eventpb"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/obs"
)

// TestBusSinkPublishesAppliedRecords: a storage wired to NATS publishes each applied entry's events and lease
// changes in order, with the trace context of the write.
func TestBusSinkPublishesAppliedRecords(t *testing.T) {
	nats, err := eventbus.StartEmbedded(eventbus.EmbeddedConfig{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer nats.Shutdown()
	logger := slog.New(slog.DiscardHandler)
	subConn, err := eventbus.Connect(nats.ClientURL(), "test-sub", logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer subConn.Close()
	var mu sync.Mutex
	var got []*eventpb.AppliedRecord
	var metas []eventbus.Meta
	if _, err := eventbus.Subscribe(subConn, "", func(rec *eventpb.AppliedRecord, meta eventbus.Meta) {
		mu.Lock()
		defer mu.Unlock()
		got, metas = append(got, rec), append(metas, meta)
	}); err != nil {
		t.Fatal(err)
	}
	if err := subConn.Flush(); err != nil {
		t.Fatal(err)
	}

	pubConn, err := eventbus.Connect(nats.ClientURL(), "test-pub", logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pubConn.Close()
	pub := eventbus.NewPublisher(pubConn, eventbus.PublisherConfig{MemberID: 1}, nil, logger)
	pub.Start()
	defer func() { _ = pub.Stop(context.Background()) }()

	tp := sdktrace.NewTracerProvider()
	tel := &obs.Telemetry{Tracers: tp, Propagator: propagation.TraceContext{}}
	s, err := New(testConfig(t, 1), Deps{Log: newMemlog(t, 1), Sink: BusSink{Publisher: pub, MemberID: 1}, Telemetry: tel, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Stop(context.Background()) }()

	ctx, span := tp.Tracer("test").Start(ctxT(t), "client")
	for _, req := range []*pb.InternalRaftRequest{
		{LeaseGrant: &pb.LeaseGrantRequest{ID: 9, TTL: 60}},
		{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("1"), Lease: 9}},
		{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("2"), Lease: 9}},
		{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}},
	} {
		if _, err := s.Submit(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	span.End()

	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d records, want 4", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if l := got[0].Leases; len(l) != 1 || l[0].Type != eventpb.LeaseChange_GRANTED || l[0].Id != 9 || l[0].Ttl != 60 {
		t.Fatalf("first record leases = %v, want a grant of lease 9 with TTL 60", l)
	}
	wantTypes := []mvccpb.Event_EventType{mvccpb.PUT, mvccpb.PUT, mvccpb.DELETE}
	for i, rec := range got[1:] {
		if len(rec.Events) != 1 || rec.Events[0].Type != wantTypes[i] || rec.Revision != int64(i+2) {
			t.Fatalf("record %d = %v, want one %v at revision %d", i+1, rec, wantTypes[i], i+2)
		}
		if metas[i+1].Revision != rec.Revision || metas[i+1].Index != rec.Index || rec.MemberId != 1 {
			t.Fatalf("record %d headers %+v disagree with body %v", i+1, metas[i+1], rec)
		}
	}
	if del := got[3].Events[0]; del.PrevKv == nil || string(del.PrevKv.Value) != "2" {
		t.Fatalf("delete event prev kv = %v, want value 2", del.PrevKv)
	}
	carried := tel.Extract(context.Background(), metas[1].Trace)
	if trace.SpanContextFromContext(carried).TraceID() != span.SpanContext().TraceID() {
		t.Fatalf("record trace %v does not continue the client's trace %v", metas[1].Trace, span.SpanContext().TraceID())
	}
}
