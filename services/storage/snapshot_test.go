package storage

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestSnapshotInstall: member 1 applies a log and reports it durable; the log drops those entries; member 2 starts
// empty on the same log, gets a KindSnapshot naming member 1, installs member 1's database and carries on with the
// entries after it, ending with the same hash.
func TestSnapshotInstall(t *testing.T) {
	log := newMemlog(t, 1)
	a := startMember(t, testConfig(t, 1), log, nil)
	ctx := ctxT(t)
	for i := range 300 {
		if _, err := a.client.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%03d", i)), Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.client.Compact(ctx, &pb.CompactionRequest{Revision: 200}); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 1 to report its durable index", func() bool {
		return log.Reported() >= 301
	})
	if err := log.DiscardThrough(log.Reported()); err != nil {
		t.Fatal(err)
	}
	log.SetSnapshotSource(1, a.URL())
	b := startMember(t, testConfig(t, 2), log, nil)
	if _, err := a.client.Put(ctx, &pb.PutRequest{Key: []byte("after"), Value: []byte("snapshot")}); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 2 to catch up", func() bool {
		st, err := b.client.Status(ctx)
		return err == nil && st.AppliedIndex == a.currentStore().Position().AppliedIndex
	})
	ha, _ := a.client.Hash(ctx, 0)
	hb, _ := b.client.Hash(ctx, 0)
	if ha.Hash != hb.Hash || hb.CompactRevision != 200 || hb.HashRevision != ha.HashRevision {
		t.Fatalf("hash of member 2 %+v, want member 1's %+v", hb, ha)
	}
	got, err := b.client.Range(ctx, &pb.RangeRequest{Key: []byte("after"), Serializable: true})
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("member 2 misses the write after the snapshot: %v %v", got, err)
	}
	if _, err := a.client.Put(ctx, &pb.PutRequest{Key: []byte("later"), Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 2 to apply a later write", func() bool {
		recs, _ := b.sink.Records()
		return len(recs) > 0 && string(recs[len(recs)-1].Events[0].Kv.Key) == "later"
	})
	recs, _ := b.sink.Records()
	if recs[0].Index <= 301 {
		t.Fatalf("member 2 applied entries the snapshot covers (first record %+v)", recs[0])
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 2 to report the installed index", func() bool {
		return b.reported.Load() >= 301
	})
}

// TestSnapshotStreamIntegrity checks the stream's description and that a corrupted stream is refused.
func TestSnapshotStreamIntegrity(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	ctx := ctxT(t)
	if _, err := m.client.Put(ctx, &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	var buf countingWriter
	info, err := m.client.Snapshot(ctx, &buf)
	if err != nil || info.AppliedIndex != 1 || info.Revision != 2 || info.TotalSize != uint64(buf.n) {
		t.Fatalf("snapshot %+v (%d bytes), %v", info, buf.n, err)
	}
}

type countingWriter struct{ n int }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// TestApplySpanJoinsClientTrace: the trace context of the Submit call travels in the log entry, and the apply span
// belongs to the client's trace.
func TestApplySpanJoinsClientTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tel := &obs.Telemetry{Tracers: tp, Propagator: propagation.TraceContext{}}
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), tel)
	ctx, span := tp.Tracer("test").Start(context.Background(), "client")
	if _, err := m.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	span.End()
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the apply span", func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == "storage.apply" && s.SpanContext.TraceID() == span.SpanContext().TraceID() {
				return true
			}
		}
		return false
	})
}

// TestEmptyAndConfChangeEntriesAdvanceIndex: entries that carry nothing for storage still move its applied index.
func TestEmptyAndConfChangeEntriesAdvanceIndex(t *testing.T) {
	log := newMemlog(t, 1)
	m := startMember(t, testConfig(t, 1), log, nil)
	for _, k := range []commitlog.Kind{commitlog.KindEmpty, commitlog.KindConfChange} {
		if _, err := log.Append(k, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := log.Append(commitlog.KindNormal, []byte("not an entry")); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "applied index 3", func() bool {
		return m.currentStore().Position().AppliedIndex == 3
	})
	if _, err := m.client.Put(ctxT(t), &pb.PutRequest{Key: []byte("a")}); err != nil {
		t.Fatal(err)
	}
}
