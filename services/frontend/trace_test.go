package frontend_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/watchhub"
)

// The stages each traced operation must show, in its trace or in spans linked to it (the batches it rode in):
// the span contract of internal/obs, as the production path records it. A stage that goes missing fails
// TestEveryStageIsTraced, naming it.
var requiredStages = []struct {
	op     string
	stages []string
}{
	{"put", []string{
		"frontend.receive", "frontend.route", "frontend.answer",
		"storage.submit", "storage.propose", "storage.wait_commit", "storage.apply", "storage.wait_applied",
		"storage.bbolt_commit",
		"consensus.propose", "consensus.raft_step", "consensus.commit", "consensus.wal_append", "consensus.wal_fsync",
		"consensus.send",
		"consensus.deliver",
	}},
	{"range.linearizable", []string{
		"frontend.receive", "frontend.route", "frontend.answer",
		"storage.wait_read_index", "storage.read_index", "consensus.read_index", "storage.wait_applied",
		"storage.bbolt_read",
	}},
	{"watch.event", []string{
		"watchhub.event", "watchhub.bus_receive", "watchhub.sequence", "watchhub.match", "watchhub.encode",
		"watchhub.send", "frontend.relay", "storage.apply",
	}},
	{"lease.keepalive", []string{"leasekeeper.keepalive", "etcdserverpb.Lease/LeaseKeepAlive"}},
}

// requiredAttributes are, per operation, attributes a stage must carry: a ReadIndex round's number and how
// many members answered it (on the leader, which sees the answers; a 3-member quorum needs at least one).
var requiredAttributes = []struct {
	op, stage string
	key       attribute.Key
}{
	{"range.linearizable", "consensus.read_index", "cairn.read_index.round"},
	{"range.linearizable", "consensus.read_index", "cairn.read_index.answered"},
}

// critical is, per operation, the span whose duration the stage times must add up to (within 10%) and the
// stages summed: its direct children on the critical path, which tile it (frontend: receive, then route, then
// answer; storage: propose, wait for the commit, the proposer's own apply, wait for the waiter to wake). Spans
// that run beside the critical path (the other members' applies, batches) are not summed.
var critical = []struct {
	op, parent string
	children   []string
}{
	{"put", "", []string{"frontend.receive", "frontend.route", "frontend.answer"}},
	{"put", "storage.submit", []string{"storage.propose", "storage.wait_commit", "storage.apply", "storage.wait_applied"}},
	{"range.linearizable", "", []string{"frontend.receive", "frontend.route", "frontend.answer"}},
	{"watch.event", "", []string{"watchhub.bus_receive", "watchhub.sequence", "watchhub.match", "watchhub.encode", "watchhub.send"}},
}

// recordEverySpan returns telemetry that samples every operation and records every span in recorder.
func recordEverySpan(t *testing.T) (*tracetest.SpanRecorder, *obs.Telemetry) {
	t.Helper()
	recorder := tracetest.NewSpanRecorder()
	sampler, err := obs.NewSampler(1)
	if err != nil {
		t.Fatal(err)
	}
	return recorder, &obs.Telemetry{
		Tracers:    sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder), sdktrace.WithSampler(sampler)),
		Propagator: propagation.TraceContext{},
	}
}

// TestTracedRelayKeepsDelivering: with every event sampled, each response a hub relays carries a trace
// carrier, which the frontend cuts off before it sends the response on. Cut off, the response must still tell
// its frame when it is written: the frontend acknowledges written frames, and a hub sends only two frames
// ahead of its acknowledgments. So puts that each come in a frame of their own all reach the watcher. Their
// values are 2 KiB, so that each frame arrives in a buffer gRPC counts (a smaller one is a plain slice, whose
// frame is taken as written once relayed).
func TestTracedRelayKeepsDelivering(t *testing.T) {
	recorder, tel := recordEverySpan(t)
	c := clustertest.Start(t, clustertest.Options{Members: 1, Frontends: 1, Watchhubs: 1, Telemetry: tel})
	client := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watch := client.Watch(ctx, "traced", clientv3.WithCreatedNotify())
	<-watch
	for i := range 8 {
		value := fmt.Sprintf("%d%s", i, strings.Repeat("v", 2<<10))
		if _, err := client.Put(ctx, "traced", value); err != nil {
			t.Fatal(err)
		}
		select {
		case resp := <-watch:
			if len(resp.Events) != 1 || string(resp.Events[0].Kv.Value) != value {
				t.Fatalf("put %d: %d events (canceled %v), want its event", i, len(resp.Events), resp.Canceled)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("put %d: no event within 10 s", i)
		}
	}
	relayed := 0
	for _, s := range recorder.Ended() {
		if s.Name() == "frontend.relay" {
			relayed++
		}
	}
	if relayed < 8 {
		t.Fatalf("%d frontend.relay spans, want one per event (8): the responses were not traced", relayed)
	}
}

// TestEveryStageIsTraced: on an in-process stack (3 members, a watchhub, a leasekeeper) sharing one span
// recorder, a put, a linearizable get, the watch event of the put and a lease keep-alive each yield one
// connected trace (the spans of the root's trace and of every trace linked to or from it) holding every stage of
// requiredStages, and the stages on the critical path cover their parent's time within 10% (a time two stages
// share counted once, a stage's time past its parent's end not counted).
func TestEveryStageIsTraced(t *testing.T) {
	recorder, tel := recordEverySpan(t)
	c := clustertest.Start(t, clustertest.Options{Members: 3, Frontends: 1, Watchhubs: 1, Leasekeepers: 1, Telemetry: tel,
		ConfigureWatchhub: func(cfg *watchhub.Config) {
			// The watch event's trace comes with its record over the bus; a revision the hub fills from storage
			// history first (the bus late by a poll, as under load) is delivered untraced, by design. Polling
			// slower than the test lasts leaves the event to the bus.
			cfg.StoragePollInterval = time.Minute
		}})
	client := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watch := client.Watch(ctx, "traced", clientv3.WithCreatedNotify())
	<-watch
	readsOnTheLeader(t, ctx, client, recorder)

	since := time.Now()
	put, err := client.Put(ctx, "traced", "v")
	if err != nil {
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
	if _, err := client.Get(ctx, "traced"); err != nil {
		t.Fatal(err)
	}
	lease, err := client.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.KeepAliveOnce(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}

	roots := map[string]func(sdktrace.ReadOnlySpan) bool{
		"put":                func(s sdktrace.ReadOnlySpan) bool { return s.SpanKind() == trace.SpanKindServer },
		"range.linearizable": func(s sdktrace.ReadOnlySpan) bool { return s.SpanKind() == trace.SpanKindServer },
		"watch.event": func(s sdktrace.ReadOnlySpan) bool {
			return intAttribute(s, "mvcc.revision") == put.Header.Revision
		},
		"lease.keepalive": func(sdktrace.ReadOnlySpan) bool { return true },
	}
	for _, tc := range requiredStages {
		t.Run(tc.op, func(t *testing.T) {
			var missing []string
			var root sdktrace.ReadOnlySpan
			var connected []sdktrace.ReadOnlySpan
			waittest.Until(missingNamed{t, &missing}, 10*time.Second, 20*time.Millisecond, "every stage of the "+tc.op, func() bool {
				ended := recorder.Ended()
				if root = findRoot(ended, tc.op, since, roots[tc.op]); root == nil {
					missing = []string{"the root span with cairn.op=" + tc.op}
					return false
				}
				connected = connectedTrace(ended, root)
				missing = missingStages(connected, tc.stages)
				for _, ra := range requiredAttributes {
					if ra.op == tc.op && !slices.ContainsFunc(connected, func(s sdktrace.ReadOnlySpan) bool {
						return s.Name() == ra.stage && intAttribute(s, ra.key) > 0
					}) {
						missing = append(missing, ra.stage+" with "+string(ra.key))
					}
				}
				if tc.op == "put" && countInTrace(connected, root, "storage.apply") != 3 {
					// Every member applies the write under the proposer's storage.submit, as the log carries it.
					missing = append(missing, "a storage.apply on each of the 3 members")
				}
				return len(missing) == 0
			})
			for _, cp := range critical {
				if cp.op != tc.op {
					continue
				}
				parent := root
				if cp.parent != "" {
					parent = spanNamed(connected, root.SpanContext().TraceID(), cp.parent)
				}
				checkAddsUp(t, connected, parent, cp.children)
			}
		})
	}
}

// missingNamed fails a wait for stages naming those still missing.
type missingNamed struct {
	testing.TB
	missing *[]string
}

func (m missingNamed) Fatalf(format string, args ...any) {
	m.TB.Helper()
	m.TB.Fatalf(format+"; missing: %v", append(args, *m.missing)...)
}

// findRoot is the latest root span with cairn.op = op started after since, that also passes match.
func findRoot(spans []sdktrace.ReadOnlySpan, op string, since time.Time, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	var root sdktrace.ReadOnlySpan
	for _, s := range spans {
		if stringAttribute(s, "cairn.op") == op && s.StartTime().After(since) && match(s) &&
			(root == nil || s.StartTime().After(root.StartTime())) {
			root = s
		}
	}
	return root
}

// connectedTrace is every span of root's trace and of the traces linked to it or from it, transitively.
func connectedTrace(spans []sdktrace.ReadOnlySpan, root sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	traces := map[trace.TraceID]bool{root.SpanContext().TraceID(): true}
	for grown := true; grown; {
		grown = false
		for _, s := range spans {
			for _, l := range s.Links() {
				in, linked := traces[s.SpanContext().TraceID()], traces[l.SpanContext.TraceID()]
				if in != linked {
					traces[s.SpanContext().TraceID()], traces[l.SpanContext.TraceID()] = true, true
					grown = true
				}
			}
		}
	}
	var connected []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if traces[s.SpanContext().TraceID()] {
			connected = append(connected, s)
		}
	}
	return connected
}

func missingStages(spans []sdktrace.ReadOnlySpan, stages []string) []string {
	var missing []string
	for _, stage := range stages {
		if !slices.ContainsFunc(spans, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == stage }) {
			missing = append(missing, stage)
		}
	}
	return missing
}

// countInTrace counts the spans called name in root's own trace.
func countInTrace(spans []sdktrace.ReadOnlySpan, root sdktrace.ReadOnlySpan, name string) int {
	n := 0
	for _, s := range spans {
		if s.Name() == name && s.SpanContext().TraceID() == root.SpanContext().TraceID() {
			n++
		}
	}
	return n
}

// spanNamed is the span called name in the trace traceID.
func spanNamed(spans []sdktrace.ReadOnlySpan, traceID trace.TraceID, name string) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.Name() == name && s.SpanContext().TraceID() == traceID {
			return s
		}
	}
	return nil
}

// checkAddsUp fails unless the durations of parent's direct children called children (one each; for
// storage.apply the one on parent's member, whose apply the proposer waits for) add up to parent's duration
// within 10%.
func checkAddsUp(t *testing.T, spans []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan, children []string) {
	t.Helper()
	if parent == nil {
		t.Fatal("no parent span to add the stages up to")
	}
	var parts []string
	var covered []interval
	for _, name := range children {
		var child sdktrace.ReadOnlySpan
		for _, s := range spans {
			if s.Name() == name && s.Parent().SpanID() == parent.SpanContext().SpanID() &&
				(name != "storage.apply" || stringAttribute(s, "cairn.member") == stringAttribute(parent, "cairn.member")) {
				child = s
			}
		}
		if child == nil {
			t.Errorf("%s has no child %s", parent.Name(), name)
			continue
		}
		covered = append(covered, interval{child.StartTime(), child.EndTime()}.within(parent.StartTime(), parent.EndTime()))
		parts = append(parts, fmt.Sprintf("%s=%v", name, child.EndTime().Sub(child.StartTime())))
	}
	total := parent.EndTime().Sub(parent.StartTime())
	sum := coveredTime(covered)
	t.Logf("%s %v = %s (covering %v)", parent.Name(), total, strings.Join(parts, " + "), sum)
	if diff := (sum - total).Abs(); diff > total/10 {
		t.Errorf("%s took %v; its stages cover %v (%s), off by more than 10%%", parent.Name(), total, sum,
			strings.Join(parts, " + "))
	}
}

// interval is the time a span ran.
type interval struct{ start, end time.Time }

// within is the part of i between start and end (empty when none): an asynchronous proposal's ack may come after
// its Submit has answered, and what a stage ran past its parent is not the parent's time.
func (i interval) within(start, end time.Time) interval {
	if i.start.Before(start) {
		i.start = start
	}
	if i.end.After(end) {
		i.end = end
	}
	if i.end.Before(i.start) {
		i.end = i.start
	}
	return i
}

// coveredTime is the time the intervals cover together, a time two of them share counted once: an asynchronous
// proposal's ack may come after its apply began, so storage.propose and storage.apply can overlap.
func coveredTime(spans []interval) time.Duration {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b interval) int { return a.start.Compare(b.start) })
	var total time.Duration
	var reached time.Time
	for _, s := range spans {
		if s.start.After(reached) {
			reached = s.start
		}
		if s.end.After(reached) {
			total += s.end.Sub(reached)
			reached = s.end
		}
	}
	return total
}

func stringAttribute(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, a := range s.Attributes() {
		if a.Key == key {
			return a.Value.String()
		}
	}
	return ""
}

func intAttribute(s sdktrace.ReadOnlySpan, key attribute.Key) int64 {
	for _, a := range s.Attributes() {
		if a.Key == key {
			return a.Value.AsInt64()
		}
	}
	return 0
}

// TestTracingKeepsTheTransport: the frontend's puts, serializable and linearizable gets reach storage over the
// pipeline links, and none over gRPC, whether the stack records every span or none: tracing measures the system
// that runs untraced.
func TestTracingKeepsTheTransport(t *testing.T) {
	recorded := func() *obs.Telemetry {
		return &obs.Telemetry{
			Tracers:    sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder())),
			Propagator: propagation.TraceContext{},
		}
	}
	tests := []struct {
		name string
		tel  *obs.Telemetry
	}{
		{"untraced", obs.NoTelemetry()},
		{"traced", recorded()},
	}
	served := map[string]uint64{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := clustertest.Start(t, clustertest.Options{Members: 1, Frontends: 1, Telemetry: tc.tel})
			client := c.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			storage := c.Members()[0].Storage()
			pipelineBefore, grpcBefore := storage.CallsServed()
			const rounds = 5
			for i := range rounds {
				key := fmt.Sprintf("k%d", i)
				if _, err := client.Put(ctx, key, "v"); err != nil {
					t.Fatal(err)
				}
				if _, err := client.Get(ctx, key, clientv3.WithSerializable()); err != nil {
					t.Fatal(err)
				}
				if _, err := client.Get(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
			pipeline, grpc := storage.CallsServed()
			if grpc != grpcBefore {
				t.Errorf("%d Submit or Range calls came over gRPC, want none", grpc-grpcBefore)
			}
			if pipeline-pipelineBefore != 3*rounds {
				t.Errorf("%d calls came over the pipeline, want %d", pipeline-pipelineBefore, 3*rounds)
			}
			served[tc.name] = pipeline - pipelineBefore
		})
	}
	if served["traced"] != served["untraced"] {
		t.Errorf("pipeline calls traced %d, untraced %d: tracing changed the transport", served["traced"], served["untraced"])
	}
}

// readsOnTheLeader waits until the frontend sends a linearizable read to the raft leader's storage: only
// there does the consensus.read_index span see the members answering. Until the frontend's first probe
// round after the election has told it which member leads (later on a loaded machine), a read may go to a
// follower's storage, whose round the leader confirms out of its sight.
func readsOnTheLeader(t *testing.T, ctx context.Context, client *clientv3.Client, recorder *tracetest.SpanRecorder) {
	t.Helper()
	waittest.Until(t, 10*time.Second, 50*time.Millisecond, "a linearizable read served on the leader", func() bool {
		since := time.Now()
		if _, err := client.Get(ctx, "warm-up"); err != nil {
			return false
		}
		return slices.ContainsFunc(recorder.Ended(), func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "consensus.read_index" && s.StartTime().After(since) &&
				intAttribute(s, "cairn.read_index.answered") > 0
		})
	})
}

func TestCoveredTime(t *testing.T) {
	at := func(us int) time.Time { return time.Unix(0, 0).Add(time.Duration(us) * time.Microsecond) }
	for _, tc := range []struct {
		name  string
		spans []interval
		want  time.Duration
	}{
		{"none", nil, 0},
		{"tiling", []interval{{at(0), at(10)}, {at(10), at(30)}, {at(30), at(31)}}, 31 * time.Microsecond},
		{"a gap", []interval{{at(0), at(10)}, {at(20), at(30)}}, 20 * time.Microsecond},
		{"an overlap counted once", []interval{{at(0), at(450)}, {at(360), at(480)}, {at(480), at(483)}}, 483 * time.Microsecond},
		{"one inside another, out of order", []interval{{at(5), at(8)}, {at(0), at(10)}}, 10 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := coveredTime(tc.spans); got != tc.want {
				t.Errorf("coveredTime = %v, want %v", got, tc.want)
			}
		})
	}
}
