package watchhub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestWatchSpanContinuesTheWrite: the hub's fan-out span of a revision belongs to the trace of the client
// request that wrote it (carried from storage's apply span through the NATS headers).
func TestWatchSpanContinuesTheWrite(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	env := newTestEnv(t, 1)
	env.tel = &obs.Telemetry{Tracers: tp, Propagator: propagation.TraceContext{}}
	// The put's record must come over the bus (which carries the trace), not from a gap fill out of storage
	// history (which cannot), however loaded the machine is: the storage publishes every record, so it need not
	// have heard the hub's first announcement of interest before the put, and a slow poll fills no gap first.
	env.publishAlways = true
	env.stopStorage(0)
	env.startStorage(0) // now tracing
	h := env.startHub(Config{StoragePollInterval: 10 * time.Second})
	cli := newClient(t, h.Addr())
	wch := cli.Watch(ctxT(t), "traced", clientv3.WithCreatedNotify())
	<-wch

	ctx, span := tp.Tracer("test").Start(ctxT(t), "client put")
	if _, err := env.storages[0].svc.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("traced"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	span.End()
	recvEvents(t, wch, 1, 5*time.Second)
	// The event's trace: a watchhub.event root linked to the write's trace, holding the hub's stages.
	var event trace.SpanContext
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "a watchhub.event span linked to the client's trace", func() bool {
		for _, s := range recorder.Ended() {
			for _, l := range s.Links() {
				if s.Name() == "watchhub.event" && l.SpanContext.TraceID() == span.SpanContext().TraceID() {
					event = s.SpanContext()
					return true
				}
			}
		}
		return false
	})
	stages := map[string]bool{}
	for _, s := range recorder.Ended() {
		if s.SpanContext().TraceID() == event.TraceID() {
			stages[s.Name()] = true
		}
	}
	for _, want := range []string{"watchhub.bus_receive", "watchhub.sequence", "watchhub.match", "watchhub.encode", "watchhub.send"} {
		if !stages[want] {
			t.Errorf("the event's trace has no %s span: %v", want, stages)
		}
	}
}

// TestHubWaitsForStorage: a hub started before any storage answers serves nothing until one does (watch
// creates wait, /health and the gRPC health service say why), then serves normally.
func TestHubWaitsForStorage(t *testing.T) {
	env := newTestEnv(t, 1)
	env.stopStorage(0)
	cfg := Config{ListenURL: "http://127.0.0.1:0", AdminAddr: "127.0.0.1:0", NATSURL: env.natsURL(),
		StorageEndpoints: []string{env.storages[0].cfg.ListenURL}, StoragePollInterval: 50 * time.Millisecond}
	h, err := New(cfg, Deps{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stopHub(h)
	health := func() (int, string) {
		resp, err := http.Get("http://" + h.AdminAddr() + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := health(); code != http.StatusServiceUnavailable || !strings.Contains(body, "revision") {
		t.Fatalf("/health before storage = %d %s", code, body)
	}
	conn := dialHub(t, h.Addr())
	hs, err := healthpb.NewHealthClient(conn).Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil || hs.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC health before storage = %v %v", hs, err)
	}
	rs := openRaw(t, conn)
	rs.create(&pb.WatchCreateRequest{Key: []byte("a")})
	rs.none(300 * time.Millisecond)

	env.startStorage(0)
	if resp := rs.next(10 * time.Second); !resp.Created {
		t.Fatalf("first response %v, want created", resp)
	}
	rev := env.put("a", "1")
	if resp := rs.next(5 * time.Second); len(resp.Events) != 1 || resp.Events[0].Kv.ModRevision != rev {
		t.Fatalf("response %v, want the put at %d", resp, rev)
	}
	if code, body := health(); code != http.StatusOK {
		t.Fatalf("/health with storage = %d %s", code, body)
	}
	var status map[string]string
	resp, err := http.Get("http://" + h.AdminAddr() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&status); err != nil || status["health"] != "true" {
		t.Fatalf("/health body %v %v", status, err)
	}
	metrics, err := http.Get("http://" + h.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer metrics.Body.Close()
	body, _ := io.ReadAll(metrics.Body)
	for _, name := range []string{"cairn_watchhub_watchers", "cairn_watchhub_head_revision " + fmt.Sprint(rev), "go_memstats_heap_inuse_bytes"} {
		if !strings.Contains(string(body), name) {
			t.Fatalf("/metrics lacks %q", name)
		}
	}
}

// TestStopEndsStreamsWithUnavailable: stopping a hub ends its streams with Unavailable, which client/v3
// retries (on another endpoint, if it has one).
func TestStopEndsStreamsWithUnavailable(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{})
	rs := openRaw(t, dialHub(t, h.Addr()))
	rs.create(&pb.WatchCreateRequest{Key: []byte("a")})
	rs.next(5 * time.Second)
	stopHub(h)
	if _, ok := <-rs.resps; ok {
		t.Fatal("response after stop")
	}
	rs.errMu.Lock()
	defer rs.errMu.Unlock()
	if !strings.Contains(rs.err.Error(), "Unavailable") {
		t.Fatalf("stream ended with %v, want Unavailable", rs.err)
	}
}

// TestRequireLeader: a stream opened with client/v3's WithRequireLeader fails with etcd's "no leader" when
// storage reports no leader for a while, and a new one is refused at once while it lasts.
func TestRequireLeader(t *testing.T) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{})
	h.mu.Lock()
	h.leaderLostAfter = 200 * time.Millisecond
	h.mu.Unlock()
	cli := newClient(t, h.Addr())
	ctx := clientv3.WithRequireLeader(ctxT(t))
	wch := cli.Watch(ctx, "a", clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		t.Fatalf("first response %+v", resp)
	}
	plain := cli.Watch(ctxT(t), "a", clientv3.WithCreatedNotify())
	<-plain
	env.log.SetProposeError(errors.New("no leader"))
	select {
	case resp := <-wch:
		if !errors.Is(resp.Err(), rpctypes.ErrNoLeader) {
			t.Fatalf("response %+v (%v), want no leader", resp, resp.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream that requires a leader did not end")
	}
	env.log.SetProposeError(nil)
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the leader back", func() bool { return !h.hasNoLeader() })
	rev := env.put("a", "1")
	if got := recvEvents(t, plain, 1, 5*time.Second); got[0].Kv.ModRevision != rev {
		t.Fatalf("plain watch got %v", describe(got))
	}
}

// TestHubLostRevisionsToCompaction: a hub cut off from the bus and its storage while the revisions it lacks
// are written and compacted cannot deliver them: its synced watchers are canceled with the compact revision
// (as etcd cancels a watcher that must start below it), and it carries on from the compact revision.
func TestHubLostRevisionsToCompaction(t *testing.T) {
	env := newTestEnv(t, 2)
	h := env.startHub(Config{StorageEndpoints: []string{env.storages[1].cfg.ListenURL}})
	rs := openRaw(t, dialHub(t, h.Addr()))
	rs.create(&pb.WatchCreateRequest{Key: []byte("k")})
	rs.next(5 * time.Second)
	env.stopNATS()
	env.stopStorage(1)
	var last int64
	for i := range 10 {
		last = env.put("k", fmt.Sprint(i))
	}
	if _, err := env.client().Compact(ctxT(t), &pb.CompactionRequest{Revision: last}); err != nil {
		t.Fatal(err)
	}
	env.startStorage(1)
	resp := rs.next(10 * time.Second)
	if !resp.Canceled || resp.CompactRevision != last || len(resp.Events) != 0 {
		t.Fatalf("response %v, want canceled at compact revision %d", resp, last)
	}
	later := openRaw(t, dialHub(t, h.Addr()))
	later.create(&pb.WatchCreateRequest{Key: []byte("k")})
	later.next(5 * time.Second)
	rev := env.put("k", "after")
	if resp := later.next(10 * time.Second); len(resp.Events) != 1 || resp.Events[0].Kv.ModRevision != rev {
		t.Fatalf("response %v, want the put at %d", resp, rev)
	}
}
