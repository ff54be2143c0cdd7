package traceview

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// Options tune an analysis.
type Options struct {
	// Slowest is how many of the slowest traces the Report lists. Default 10.
	Slowest int
	// From and To, when set, keep only the requests whose root span started in [From, To] (a benchmark's run).
	From, To time.Time
	// ClientRequests keeps only clients' requests: roots with cairn.op, or untagged roots named after an etcd
	// API method (otelgrpc's etcdserverpb.KV/Put), leaving out the services' own background calls.
	ClientRequests bool
}

// etcdAPIPrefixes start the names of otelgrpc's spans of etcd's gRPC services.
var etcdAPIPrefixes = []string{"etcdserverpb.", "v3lockpb.", "v3electionpb."}

// clientRequest reports whether a trace's root is a client's request to the etcd API.
func clientRequest(t *tree) bool {
	if t.tagged {
		return true
	}
	for _, prefix := range etcdAPIPrefixes {
		if strings.HasPrefix(t.op, prefix) {
			return true
		}
	}
	return false
}

// Report is the analysis of a set of traces: one OpReport per operation type, most frequent first, and the
// slowest traces of any type.
type Report struct {
	// Traces is the number of request traces analysed (batch traces are counted in their requests).
	Traces  int
	Ops     []*OpReport
	Slowest []*TraceView
}

// OpReport is where the time of one operation type's requests went.
type OpReport struct {
	Op    string
	Count int
	// P50, P90, P99 and Max are of the end-to-end (root span) duration.
	P50, P90, P99, Max time.Duration
	// Stages are the span names seen in this type's traces, in the order they usually start.
	Stages []StageStats
	// Typical is the median trace (by end-to-end duration), Slowest the slowest.
	Typical, Slowest *TraceView
	// tagged says Op came from cairn.op rather than the root span's name; client that the type is a
	// client's request (see Options.ClientRequests).
	tagged, client bool
}

// StageStats describes one stage (span name) of an operation type.
type StageStats struct {
	Name string
	// Count is the number of spans, Traces the number of traces they appear in.
	Count, Traces int
	// P50, P90 and P99 are of the spans' own (inclusive) durations.
	P50, P90, P99 time.Duration
	// Share is the stage's part of the end-to-end time on the critical path (0..1); an operation type's
	// shares add up to 1.
	Share float64
	// Linked says the stage reached the requests through span links (a batched stage).
	Linked bool
	// meanOffset orders the stages: the mean start of the stage after the root's start.
	meanOffset time.Duration
}

// TraceView is one request trace laid out for a waterfall: its spans depth-first (children by start time),
// linked batch spans placed under the span they link to, and its critical path.
type TraceView struct {
	ID       TraceID
	Op       string
	Start    time.Time
	Duration time.Duration
	Spans    []ViewSpan
	// Critical is the critical path: each span on it with its own time on the path, in the order of its first
	// moment on the path. The Self times add up to Duration.
	Critical []Segment
}

// ViewSpan is a span of a TraceView.
type ViewSpan struct {
	*Span
	Depth int
	// Offset is the span's start after the root's start.
	Offset time.Duration
	// Linked marks a batch span (or its descendant) that reached the trace through a link.
	Linked bool
	// Critical is the span's own time on the critical path.
	Critical time.Duration
}

// Segment is one span's time on a critical path.
type Segment struct {
	Name string
	Span SpanID
	Self time.Duration
}

// node is a span in a trace's tree.
type node struct {
	span     *Span
	parent   *node
	children []*node
	// waitedOn are, for a wait stage, the detached spans it waited for (see adoptWaited).
	waitedOn []*node
	linked   bool
	walking  bool // on walkCritical's stack
	critical time.Duration
	// pathStart is the earliest moment the node is on the critical path (valid when critical > 0).
	pathStart time.Time
}

// linkedSpan is a span of some trace that links to target.
type linkedSpan struct {
	span   *Span
	target SpanID
}

// Analyze turns traces into a Report. It does no I/O and keeps nothing.
func Analyze(traces map[TraceID][]*Span, opts Options) *Report {
	if opts.Slowest <= 0 {
		opts.Slowest = 10
	}
	a := &analysis{traces: traces, linkedInto: map[TraceID][]linkedSpan{}, children: map[TraceID]map[SpanID][]*Span{}}
	for _, spans := range traces {
		for _, span := range spans {
			if span.Op != "" {
				continue // a request of its own (a watch event linking the write it reports): its links are causes, not a batch
			}
			for _, ref := range span.Links {
				if ref.Trace != span.Trace {
					a.linkedInto[ref.Trace] = append(a.linkedInto[ref.Trace], linkedSpan{span, ref.Span})
				}
			}
		}
	}
	byOp := map[string][]*tree{}
	for id := range traces {
		if t := a.build(id); t != nil && opts.inWindow(t.root.span.Start) && (!opts.ClientRequests || clientRequest(t)) {
			byOp[t.op] = append(byOp[t.op], t)
		}
	}
	report := &Report{}
	var all []*tree
	for op, trees := range byOp {
		report.Ops = append(report.Ops, opReport(op, trees))
		report.Traces += len(trees)
		all = append(all, trees...)
	}
	// Types from cairn.op first (the contract's requests), then untagged etcd API calls, then the rest.
	slices.SortFunc(report.Ops, func(x, y *OpReport) int {
		return cmp.Or(boolOrder(x.tagged, y.tagged), boolOrder(x.client, y.client), y.Count-x.Count, cmp.Compare(x.Op, y.Op))
	})
	slices.SortFunc(all, func(x, y *tree) int { return cmp.Or(cmp.Compare(y.duration(), x.duration()), compareIDs(x.id, y.id)) })
	for _, t := range all[:min(len(all), opts.Slowest)] {
		report.Slowest = append(report.Slowest, t.view())
	}
	return report
}

func (o Options) inWindow(start time.Time) bool {
	return (o.From.IsZero() || !start.Before(o.From)) && (o.To.IsZero() || !start.After(o.To))
}

type analysis struct {
	traces     map[TraceID][]*Span
	linkedInto map[TraceID][]linkedSpan
	children   map[TraceID]map[SpanID][]*Span // built on demand: a trace's spans by parent
}

// tree is one request trace assembled for analysis.
type tree struct {
	id     TraceID
	op     string
	tagged bool
	root   *node
	nodes  []*node
	// length is the root's duration (sorting compares it often).
	length time.Duration
}

func (t *tree) duration() time.Duration { return t.length }

// build assembles trace id's tree with its linked batch spans and walks its critical path; nil when the
// trace is not a request (a batch trace, whose root only links to others).
func (a *analysis) build(id TraceID) *tree {
	spans := a.traces[id]
	t := &tree{id: id, nodes: make([]*node, 0, len(spans))}
	// A trace's own spans by id: a map for big traces, a scan of the few own nodes for the usual small ones
	// (most of an analysis's time was making maps).
	var byID map[SpanID]*node
	if len(spans) > 32 {
		byID = make(map[SpanID]*node, len(spans))
	}
	own := 0
	lookup := func(id SpanID) (*node, bool) {
		if byID != nil {
			n, ok := byID[id]
			return n, ok
		}
		for _, n := range t.nodes[:own] {
			if n.span.ID == id {
				return n, true
			}
		}
		return nil, false
	}
	for _, span := range spans {
		if _, dup := lookup(span.ID); dup {
			continue
		}
		n := &node{span: span}
		if byID != nil {
			byID[span.ID] = n
		}
		t.nodes = append(t.nodes, n)
		own++
	}
	var roots []*node
	for _, n := range t.nodes {
		if _, ok := lookup(n.span.Parent); n.span.Parent.IsZero() || !ok {
			roots = append(roots, n)
		}
	}
	if len(roots) == 0 {
		return nil
	}
	t.root = slices.MinFunc(roots, func(x, y *node) int {
		return cmp.Or(boolOrder(x.span.Op != "", y.span.Op != ""), boolOrder(len(x.span.Links) == 0, len(y.span.Links) == 0),
			x.span.Start.Compare(y.span.Start), cmp.Compare(y.span.Duration(), x.span.Duration()))
	})
	switch {
	case t.root.span.Op != "":
		t.op, t.tagged = t.root.span.Op, true
	case len(t.root.span.Links) > 0:
		return nil // a batch: its time is counted in the requests it links
	default:
		t.op = t.root.span.Name
	}
	for _, n := range t.nodes {
		if n == t.root {
			continue
		}
		parent, ok := lookup(n.span.Parent)
		if !ok {
			parent = t.root // its parent never arrived (or was evicted): keep its time in the trace
		}
		n.parent = parent
		parent.children = append(parent.children, n)
	}
	seen := map[*Span]bool{}
	for _, ls := range a.linkedInto[id] {
		if seen[ls.span] {
			continue
		}
		parent, ok := lookup(ls.target)
		if !ok {
			parent = t.root
		}
		linked := a.linkedSubtree(t, ls.span, seen)
		linked.parent = parent
		parent.children = append(parent.children, linked)
	}
	adoptWaited(t)
	walkCritical(t.root, t.root.span.Start, t.root.span.End)
	t.length = t.root.span.Duration()
	return t
}

// linkedSubtree is a node for a linked batch span and its descendants in its own trace, all marked linked.
func (a *analysis) linkedSubtree(t *tree, span *Span, seen map[*Span]bool) *node {
	seen[span] = true
	n := &node{span: span, linked: true}
	t.nodes = append(t.nodes, n)
	for _, child := range a.childrenOf(span.Trace)[span.ID] {
		if !seen[child] {
			linked := a.linkedSubtree(t, child, seen)
			linked.parent = n
			n.children = append(n.children, linked)
		}
	}
	// A batch of batches: the spans linking this one (consensus.read_index links the ReadIndex calls of
	// storage.read_index rounds) are stages of the request too.
	for _, ls := range a.linkedInto[span.Trace] {
		if ls.target == span.ID && !seen[ls.span] {
			linked := a.linkedSubtree(t, ls.span, seen)
			linked.parent = n
			n.children = append(n.children, linked)
		}
	}
	return n
}

// isWait reports whether a span is a wait stage ("<service>.wait_<what>"): time spent until work done
// elsewhere in the trace finishes (storage.wait_commit waits for consensus to commit the entry).
func isWait(name string) bool {
	_, stage, ok := strings.Cut(name, ".")
	return ok && strings.HasPrefix(stage, "wait_")
}

// adoptWaited gives each wait stage of t the detached spans it waited for, so that the critical path goes
// through the work rather than stopping at the wait. A detached span outlives its parent (consensus.commit
// starts under the Propose call and ends at the commit, long after the call returned), so its parent's window
// clips it off the path. A wait waited for a detached span that was under way when the wait began and ended
// before the wait did (a bbolt commit still running when storage.wait_applied ends is not what it waited
// for; spans of other processes are compared on their clocks, the same machine's for a member): the walk of the wait's window treats those as children (each moment of the path is still
// counted once, so the shares still add up to 100%).
func adoptWaited(t *tree) {
	var waits, detached []*node
	for _, n := range t.nodes {
		switch {
		case isWait(n.span.Name) && len(n.children) == 0:
			waits = append(waits, n)
		case n.parent != nil && n.span.End.After(n.parent.span.End):
			detached = append(detached, n)
		}
	}
	for _, wait := range waits {
		for _, d := range detached {
			if !d.span.Start.After(wait.span.Start) && d.span.End.After(wait.span.Start) && !d.span.End.After(wait.span.End) &&
				!d.isAncestorOf(wait) {
				wait.waitedOn = append(wait.waitedOn, d)
			}
		}
	}
}

func (a *analysis) childrenOf(id TraceID) map[SpanID][]*Span {
	if byParent, ok := a.children[id]; ok {
		return byParent
	}
	byParent := map[SpanID][]*Span{}
	for _, span := range a.traces[id] {
		if !span.Parent.IsZero() {
			byParent[span.Parent] = append(byParent[span.Parent], span)
		}
	}
	a.children[id] = byParent
	return byParent
}

func (n *node) isAncestorOf(other *node) bool {
	for p := other.parent; p != nil; p = p.parent {
		if p == n {
			return true
		}
	}
	return false
}

// walkCritical adds n's critical-path time within [from, to): from the window's end back to its start, the
// child that ends last (clipped to what is left) is on the path, recursively; the gaps between are n's own.
func walkCritical(n *node, from, to time.Time) {
	start, end := later(n.span.Start, from), earlier(n.span.End, to)
	if !end.After(start) || n.walking {
		return // n.walking: a wait's adopted span that leads back to the wait is no path
	}
	n.walking = true
	defer func() { n.walking = false }()
	children := append(slices.Clone(n.children), n.waitedOn...)
	slices.SortFunc(children, func(x, y *node) int { return y.span.End.Compare(x.span.End) })
	cursor := end
	for _, child := range children {
		if !cursor.After(start) {
			break
		}
		childStart, childEnd := later(child.span.Start, start), earlier(child.span.End, cursor)
		if !childEnd.After(childStart) {
			continue
		}
		n.addCritical(childEnd, cursor)
		walkCritical(child, childStart, childEnd)
		cursor = childStart
	}
	n.addCritical(start, cursor)
}

// addCritical puts [from, to) of n's own time on the critical path.
func (n *node) addCritical(from, to time.Time) {
	if !to.After(from) {
		return
	}
	if n.critical == 0 || from.Before(n.pathStart) {
		n.pathStart = from
	}
	n.critical += to.Sub(from)
}

// view lays the tree out for a waterfall.
func (t *tree) view() *TraceView {
	v := &TraceView{ID: t.id, Op: t.op, Start: t.root.span.Start, Duration: t.duration()}
	var visit func(n *node, depth int)
	visit = func(n *node, depth int) {
		v.Spans = append(v.Spans, ViewSpan{Span: n.span, Depth: depth, Offset: n.span.Start.Sub(v.Start), Linked: n.linked, Critical: n.critical})
		children := slices.Clone(n.children)
		slices.SortStableFunc(children, func(x, y *node) int { return x.span.Start.Compare(y.span.Start) })
		for _, child := range children {
			visit(child, depth+1)
		}
	}
	visit(t.root, 0)
	onPath := slices.DeleteFunc(slices.Clone(t.nodes), func(n *node) bool { return n.critical == 0 })
	slices.SortStableFunc(onPath, func(x, y *node) int { return x.pathStart.Compare(y.pathStart) })
	for _, n := range onPath {
		v.Critical = append(v.Critical, Segment{Name: n.span.Name, Span: n.span.ID, Self: n.critical})
	}
	return v
}

// opReport summarises one operation type's trees.
func opReport(op string, trees []*tree) *OpReport {
	slices.SortFunc(trees, func(x, y *tree) int { return cmp.Or(cmp.Compare(x.duration(), y.duration()), compareIDs(x.id, y.id)) })
	durations := make([]time.Duration, len(trees))
	var total time.Duration
	for i, t := range trees {
		durations[i] = t.duration()
		total += durations[i]
	}
	r := &OpReport{Op: op, Count: len(trees), tagged: trees[0].tagged, client: clientRequest(trees[0]), P50: percentile(durations, 0.50), P90: percentile(durations, 0.90),
		P99: percentile(durations, 0.99), Max: durations[len(durations)-1],
		Typical: trees[(len(trees)-1)/2].view(), Slowest: trees[len(trees)-1].view()}
	type acc struct {
		durations []time.Duration
		critical  time.Duration
		offsets   time.Duration
		traces    int
		linked    bool
	}
	stages := map[string]*acc{}
	for _, t := range trees {
		inTrace := map[string]bool{}
		for _, n := range t.nodes {
			s := stages[n.span.Name]
			if s == nil {
				s = &acc{}
				stages[n.span.Name] = s
			}
			s.durations = append(s.durations, n.span.Duration())
			s.critical += n.critical
			s.offsets += n.span.Start.Sub(t.root.span.Start)
			s.linked = s.linked || n.linked
			if !inTrace[n.span.Name] {
				inTrace[n.span.Name] = true
				s.traces++
			}
		}
	}
	for name, s := range stages {
		slices.Sort(s.durations)
		stage := StageStats{Name: name, Count: len(s.durations), Traces: s.traces, Linked: s.linked,
			P50: percentile(s.durations, 0.50), P90: percentile(s.durations, 0.90), P99: percentile(s.durations, 0.99),
			meanOffset: s.offsets / time.Duration(len(s.durations))}
		if total > 0 {
			stage.Share = float64(s.critical) / float64(total)
		}
		r.Stages = append(r.Stages, stage)
	}
	slices.SortFunc(r.Stages, func(x, y StageStats) int {
		return cmp.Or(cmp.Compare(x.meanOffset, y.meanOffset), cmp.Compare(x.Name, y.Name))
	})
	return r
}

// percentile is the nearest-rank percentile p (0..1] of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// boolOrder sorts true first.
func boolOrder(x, y bool) int {
	switch {
	case x == y:
		return 0
	case x:
		return -1
	default:
		return 1
	}
}

func compareIDs(x, y TraceID) int { return slices.Compare(x[:], y[:]) }
