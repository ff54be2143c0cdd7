package traceview

import (
	"math"
	"testing"
	"time"
)

// spanBuilder makes synthetic spans: ids are small numbers, times are milliseconds after a fixed epoch.
type spanBuilder struct{ epoch time.Time }

func traceID(n byte) TraceID { return TraceID{15: n} }
func spanID(n byte) SpanID   { return SpanID{7: n} }

func (b spanBuilder) span(trace, id, parent byte, name string, startMs, endMs float64) *Span {
	at := func(v float64) time.Time { return b.epoch.Add(time.Duration(v * float64(time.Millisecond))) }
	s := &Span{Trace: traceID(trace), ID: spanID(id), Name: name, Start: at(startMs), End: at(endMs)}
	if parent != 0 {
		s.Parent = spanID(parent)
	}
	return s
}

func withOp(s *Span, op string) *Span { s.Op = op; return s }

func withLinks(s *Span, refs ...SpanRef) *Span { s.Links = refs; return s }

func group(spans ...*Span) map[TraceID][]*Span {
	out := map[TraceID][]*Span{}
	for _, s := range spans {
		out[s.Trace] = append(out[s.Trace], s)
	}
	return out
}

func msd(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func TestAnalyzeCriticalPath(t *testing.T) {
	b := spanBuilder{epoch: time.Unix(1_700_000_000, 0)}
	tests := []struct {
		name  string
		spans map[TraceID][]*Span
		op    string
		// critical is each stage's time on the median trace's critical path, in the order of its first moment
		// on the path.
		critical []Segment
		// shares are the op's stage shares (only those listed are checked).
		shares map[string]float64
	}{
		{
			name: "a chain: each span's own time around its child",
			spans: group(
				withOp(b.span(1, 1, 0, "frontend.receive", 0, 10), "put"),
				b.span(1, 2, 1, "storage.submit", 1, 9),
				b.span(1, 3, 2, "consensus.wal_fsync", 2, 8),
			),
			op: "put",
			critical: []Segment{{Name: "frontend.receive", Self: msd(2)}, {Name: "storage.submit", Self: msd(2)},
				{Name: "consensus.wal_fsync", Self: msd(6)}},
			shares: map[string]float64{"frontend.receive": 0.2, "storage.submit": 0.2, "consensus.wal_fsync": 0.6},
		},
		{
			name: "parallel children: the one that ends last, then what is left of the other",
			spans: group(
				withOp(b.span(1, 1, 0, "frontend.receive", 0, 10), "range.linearizable"),
				b.span(1, 2, 1, "consensus.read_index", 1, 5),
				b.span(1, 3, 1, "storage.bbolt_read", 2, 8),
			),
			op: "range.linearizable",
			critical: []Segment{{Name: "frontend.receive", Self: msd(3)}, {Name: "consensus.read_index", Self: msd(1)},
				{Name: "storage.bbolt_read", Self: msd(6)}},
			shares: map[string]float64{"frontend.receive": 0.3, "storage.bbolt_read": 0.6, "consensus.read_index": 0.1},
		},
		{
			name: "a child outliving its parent is clipped to the parent's end",
			spans: group(
				withOp(b.span(1, 1, 0, "frontend.receive", 0, 10), "put"),
				b.span(1, 2, 1, "storage.submit", 4, 14),
			),
			op:       "put",
			critical: []Segment{{Name: "frontend.receive", Self: msd(4)}, {Name: "storage.submit", Self: msd(6)}},
		},
		{
			name: "a batch span linked from another trace is a stage of every request it carries",
			spans: group(
				withOp(b.span(1, 1, 0, "frontend.receive", 0, 10), "put"),
				b.span(1, 2, 1, "storage.propose", 1, 9),
				withOp(b.span(2, 1, 0, "frontend.receive", 0, 12), "put"),
				b.span(2, 2, 1, "storage.propose", 1, 11),
				withLinks(b.span(3, 1, 0, "consensus.wal_fsync", 3, 7),
					SpanRef{traceID(1), spanID(2)}, SpanRef{traceID(2), spanID(2)}),
				b.span(3, 2, 1, "consensus.wal_append", 3, 4), // the batch's own child comes along
			),
			op: "put",
			// the median of two traces (10 and 12 ms) is the first, trace 1
			critical: []Segment{{Name: "frontend.receive", Self: msd(2)}, {Name: "storage.propose", Self: msd(4)},
				{Name: "consensus.wal_append", Self: msd(1)}, {Name: "consensus.wal_fsync", Self: msd(3)}},
			shares: map[string]float64{"consensus.wal_fsync": 6.0 / 22, "consensus.wal_append": 2.0 / 22},
		},
		{
			name: "a batch linking a batch's span (consensus.read_index linking a storage.read_index round's call) is a stage too",
			spans: group(
				withOp(b.span(1, 1, 0, "frontend.receive", 0, 10), "range.linearizable"),
				b.span(1, 2, 1, "storage.wait_read_index", 1, 9),
				withLinks(b.span(2, 1, 0, "storage.read_index", 2, 8), SpanRef{traceID(1), spanID(2)}),
				b.span(2, 2, 1, "consensus.propose/ReadIndex", 2, 8),
				withLinks(b.span(3, 1, 0, "consensus.read_index", 3, 7), SpanRef{traceID(2), spanID(2)}),
			),
			op: "range.linearizable",
			critical: []Segment{{Name: "frontend.receive", Self: msd(2)}, {Name: "storage.wait_read_index", Self: msd(2)},
				{Name: "consensus.propose/ReadIndex", Self: msd(2)}, {Name: "consensus.read_index", Self: msd(4)}},
			shares: map[string]float64{"consensus.read_index": 0.4},
		},
		{
			name: "a request linking another (a watch event linking its write) is not a batch stage of it",
			spans: group(
				withOp(b.span(1, 1, 0, "frontend.receive", 0, 10), "put"),
				b.span(1, 2, 1, "storage.apply", 6, 8),
				withLinks(withOp(b.span(2, 1, 0, "watchhub.event", 7, 12), "watch.event"), SpanRef{traceID(1), spanID(2)}),
			),
			op:       "put",
			critical: []Segment{{Name: "frontend.receive", Self: msd(8)}, {Name: "storage.apply", Self: msd(2)}},
		},
		{
			name: "a wait's time goes to the detached work it waited for, and that work's batches",
			spans: group(
				withOp(b.span(1, 1, 0, "frontend.receive", 0, 10), "put"),
				b.span(1, 2, 1, "storage.propose", 0, 2),
				b.span(1, 3, 2, "consensus.propose/Propose", 0.5, 1.5),
				b.span(1, 4, 3, "consensus.commit", 1, 8), // outlives the call that started it
				b.span(1, 5, 1, "storage.wait_commit", 2, 8.5),
				b.span(1, 6, 1, "storage.apply", 8.5, 9.5),
				b.span(1, 7, 1, "storage.apply", 7.5, 8.4),    // another member's: began after the wait, not waited for
				b.span(1, 8, 2, "storage.bbolt_commit", 2, 9), // detached, but still running when the wait ended
				withLinks(b.span(2, 1, 0, "consensus.wal_fsync", 3, 7), SpanRef{traceID(1), spanID(4)}),
			),
			op: "put",
			critical: []Segment{{Name: "storage.propose", Self: msd(1)}, {Name: "consensus.propose/Propose", Self: msd(0.5)},
				{Name: "consensus.commit", Self: msd(2.5)}, {Name: "consensus.wal_fsync", Self: msd(4)},
				{Name: "storage.wait_commit", Self: msd(0.5)}, {Name: "storage.apply", Self: msd(1)},
				{Name: "frontend.receive", Self: msd(0.5)}},
			shares: map[string]float64{"consensus.commit": 0.25, "consensus.wal_fsync": 0.4, "storage.wait_commit": 0.05},
		},
		{
			name: "a root without cairn.op is typed by its name; an orphan's time stays in the trace",
			spans: group(
				b.span(1, 1, 0, "etcdserverpb.KV/Put", 0, 10),
				b.span(1, 3, 9, "storage.apply", 5, 9), // parent 9 never arrived
			),
			op:       "etcdserverpb.KV/Put",
			critical: []Segment{{Name: "etcdserverpb.KV/Put", Self: msd(6)}, {Name: "storage.apply", Self: msd(4)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			report := Analyze(tt.spans, Options{})
			op := findOp(t, report, tt.op)
			got := op.Typical.Critical
			if len(got) != len(tt.critical) {
				t.Fatalf("critical path %s, want %d segments %v", pathText(got), len(tt.critical), tt.critical)
			}
			var sum time.Duration
			for i, want := range tt.critical {
				if got[i].Name != want.Name || got[i].Self != want.Self {
					t.Fatalf("critical path %s; segment %d want %s %s", pathText(got), i, want.Name, ms(want.Self))
				}
				sum += got[i].Self
			}
			if sum != op.Typical.Duration {
				t.Fatalf("critical path adds up to %v, trace lasted %v", sum, op.Typical.Duration)
			}
			var total float64
			for _, stage := range op.Stages {
				total += stage.Share
				if want, ok := tt.shares[stage.Name]; ok && math.Abs(stage.Share-want) > 1e-9 {
					t.Errorf("stage %s share %.4f, want %.4f", stage.Name, stage.Share, want)
				}
			}
			if math.Abs(total-1) > 1e-9 {
				t.Errorf("shares add up to %.4f, want 1", total)
			}
		})
	}
}

func findOp(t *testing.T, r *Report, name string) *OpReport {
	t.Helper()
	for _, op := range r.Ops {
		if op.Op == name {
			return op
		}
	}
	var names []string
	for _, op := range r.Ops {
		names = append(names, op.Op)
	}
	t.Fatalf("no operation type %q in the report (have %v)", name, names)
	return nil
}

func TestAnalyzePercentilesAndOpTypes(t *testing.T) {
	b := spanBuilder{epoch: time.Unix(1_700_000_000, 0)}
	var spans []*Span
	for i := 1; i <= 100; i++ { // puts of 1..100 ms, each with a storage.apply of half its time
		spans = append(spans, withOp(b.span(byte(i), 1, 0, "frontend.receive", 0, float64(i)), "put"),
			b.span(byte(i), 2, 1, "storage.apply", 0, float64(i)/2))
	}
	for i := 101; i <= 103; i++ {
		spans = append(spans, withOp(b.span(byte(i), 1, 0, "frontend.receive", 0, 1), "lease.keepalive"))
	}
	for i := 110; i < 115; i++ { // background calls without cairn.op: typed by name, listed after the requests
		spans = append(spans, b.span(byte(i), 1, 0, "cairn.storage.Storage/Status", 0, 1))
	}
	// a batch trace on its own is no request
	spans = append(spans, withLinks(b.span(200, 1, 0, "storage.bbolt_commit", 0, 1), SpanRef{traceID(1), spanID(1)}))
	spans = append(spans, b.span(120, 1, 0, "etcdserverpb.KV/Range", 0, 1)) // an untagged client request
	if clients := Analyze(group(spans...), Options{ClientRequests: true}); len(clients.Ops) != 3 || clients.Traces != 104 {
		t.Errorf("client requests only: %d traces of %d types, want the 104 puts, keep-alives and range", clients.Traces, len(clients.Ops))
	}
	report := Analyze(group(spans...), Options{Slowest: 3})
	if report.Traces != 109 || len(report.Ops) != 4 {
		t.Fatalf("%d traces in %d op types, want 109 in 4", report.Traces, len(report.Ops))
	}
	put := report.Ops[0]
	tests := []struct {
		what      string
		got, want any
	}{
		{"most frequent op first", put.Op, "put"},
		{"put count", put.Count, 100},
		{"put p50", put.P50, msd(50)},
		{"put p90", put.P90, msd(90)},
		{"put p99", put.P99, msd(99)},
		{"put max", put.Max, msd(100)},
		{"median trace", put.Typical.Duration, msd(50)},
		{"slowest put", put.Slowest.Duration, msd(100)},
		{"stages of put (the linked commit included)", len(put.Stages), 3},
		{"storage.apply p90", stage(put, "storage.apply").P90, msd(45)},
		{"storage.apply share (not in trace 1, where the linked commit ends last)", stage(put, "storage.apply").Share, (2525 - 0.5) / 5050},
		{"linked commit seen in one trace", stage(put, "storage.bbolt_commit").Traces, 1},
		{"linked commit marked", stage(put, "storage.bbolt_commit").Linked, true},
		{"slowest listed", len(report.Slowest), 3},
		{"slowest first", report.Slowest[0].Duration, msd(100)},
		{"keepalives", findOp(t, report, "lease.keepalive").Count, 3},
		{"cairn.op types before the more frequent untagged one", report.Ops[1].Op, "lease.keepalive"},
		{"then untagged client requests", report.Ops[2].Op, "etcdserverpb.KV/Range"},
		{"then the other untagged types", report.Ops[3].Op, "cairn.storage.Storage/Status"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.what, tt.got, tt.want)
		}
	}
}

func stage(op *OpReport, name string) StageStats {
	for _, s := range op.Stages {
		if s.Name == name {
			return s
		}
	}
	return StageStats{}
}

func TestStoreEvictsOldestTraces(t *testing.T) {
	b := spanBuilder{epoch: time.Unix(1_700_000_000, 0)}
	store := NewStore(5)
	for i := 1; i <= 4; i++ { // four traces of two spans: 8 spans over a bound of 5
		store.AddSpans([]*Span{withOp(b.span(byte(i), 1, 0, "frontend.receive", 0, 1), "put"), b.span(byte(i), 2, 1, "storage.apply", 0, 1)})
	}
	stats := store.Stats()
	if stats.Spans != 4 || stats.Traces != 2 || stats.Evicted != 4 || stats.Received != 8 {
		t.Fatalf("stats %+v, want 4 spans in 2 traces, 4 evicted of 8", stats)
	}
	traces := store.Traces()
	for _, want := range []byte{3, 4} {
		if len(traces[traceID(want)]) != 2 {
			t.Errorf("trace %d not kept whole: %d spans", want, len(traces[traceID(want)]))
		}
	}
}
