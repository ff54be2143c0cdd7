package traceview

import (
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// TraceID is an OTLP trace id.
type TraceID [16]byte

// String is the id in lowercase hex, as Jaeger and the W3C traceparent write it.
func (id TraceID) String() string { return hex.EncodeToString(id[:]) }

// SpanID is an OTLP span id; the zero SpanID means "none" (a root's parent).
type SpanID [8]byte

// String is the id in lowercase hex.
func (id SpanID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the empty span id.
func (id SpanID) IsZero() bool { return id == SpanID{} }

// SpanRef names one span of one trace: the target of a span link.
type SpanRef struct {
	Trace TraceID
	Span  SpanID
}

// Span is what traceview keeps of one received span: identity, timing, the resource's service and the
// attributes of the span contract. A Span is never changed once stored.
type Span struct {
	Trace  TraceID
	ID     SpanID
	Parent SpanID
	Name   string
	// Service is the resource's service.name (cairn-frontend, ...), Instance its service.instance.id.
	Service  string
	Instance string
	Start    time.Time
	End      time.Time
	// Op is the span's cairn.op attribute (set on the root of a client request's trace).
	Op string
	// Links are the spans this one links to (a batch span links every request it carries).
	Links []SpanRef
	// Attrs holds the contract's attributes (cairn.*, raft.*, mvcc.*) as text, in the order received.
	Attrs []Attr
}

// Attr is one span attribute written as text.
type Attr struct {
	Key, Value string
}

// Attr is the value of the span's attribute key ("" when absent).
func (s *Span) Attr(key string) string {
	for _, a := range s.Attrs {
		if a.Key == key {
			return a.Value
		}
	}
	return ""
}

// Duration is End - Start, never negative.
func (s *Span) Duration() time.Duration { return max(0, s.End.Sub(s.Start)) }

// kept reports whether an attribute is one the analysis or the pages show.
func kept(key string) bool {
	return strings.HasPrefix(key, "cairn.") || strings.HasPrefix(key, "raft.") || strings.HasPrefix(key, "mvcc.") ||
		key == "rpc.method" || key == "rpc.service"
}

// DefaultMaxSpans bounds a Store when its configuration does not: about 150 MB of spans (BenchmarkStoreAdd
// measures some 300 bytes of heap per stored span).
const DefaultMaxSpans = 500_000

// Store keeps received spans grouped by trace, at most maxSpans of them: past the bound the traces that
// arrived first are evicted whole. It is safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	maxSpans int
	traces   map[TraceID][]*Span
	// arrival lists trace ids in the order their first span arrived, from head; evicted ids are skipped.
	arrival []TraceID
	head    int
	spans   int
	// received and evicted count spans over the Store's life.
	received, evicted int64
	// names interns the strings spans repeat (span names, services, attribute keys), up to maxInterned.
	names map[string]string
}

// maxInterned bounds the Store's table of interned strings, whatever names the exporters send.
const maxInterned = 10_000

// NewStore returns an empty Store bounded to maxSpans spans (DefaultMaxSpans when maxSpans <= 0).
func NewStore(maxSpans int) *Store {
	if maxSpans <= 0 {
		maxSpans = DefaultMaxSpans
	}
	return &Store{maxSpans: maxSpans, traces: map[TraceID][]*Span{}, names: map[string]string{}}
}

// Add stores every span of an OTLP export; spans without a valid trace or span id are skipped. It returns how
// many were stored.
func (s *Store) Add(resourceSpans []*tracepb.ResourceSpans) int {
	var spans []*Span
	for _, rs := range resourceSpans {
		service, instance := resourceNames(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, ps := range ss.GetSpans() {
				if span, ok := convertSpan(ps, service, instance); ok {
					spans = append(spans, span)
				}
			}
		}
	}
	s.AddSpans(spans)
	return len(spans)
}

// AddSpans stores spans (already converted), evicting the oldest traces past the bound.
func (s *Store) AddSpans(spans []*Span) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, span := range spans {
		span.Name, span.Service, span.Instance, span.Op = s.intern(span.Name), s.intern(span.Service), s.intern(span.Instance), s.intern(span.Op)
		for i := range span.Attrs {
			span.Attrs[i].Key = s.intern(span.Attrs[i].Key)
		}
		existing, ok := s.traces[span.Trace]
		if !ok {
			s.arrival = append(s.arrival, span.Trace)
		}
		s.traces[span.Trace] = append(existing, span)
	}
	s.spans += len(spans)
	s.received += int64(len(spans))
	for s.spans > s.maxSpans && s.head < len(s.arrival) {
		oldest := s.arrival[s.head]
		s.head++
		n := len(s.traces[oldest])
		delete(s.traces, oldest)
		s.spans -= n
		s.evicted += int64(n)
	}
	if s.head > len(s.arrival)/2 && s.head > 1024 { // reclaim the evicted prefix now and then
		s.arrival = append([]TraceID(nil), s.arrival[s.head:]...)
		s.head = 0
	}
}

// intern returns the Store's copy of name, so that the spans share one string per name. Called with mu held.
func (s *Store) intern(name string) string {
	if kept, ok := s.names[name]; ok {
		return kept
	}
	if len(s.names) < maxInterned {
		s.names[name] = name
	}
	return name
}

// Traces returns every stored trace's spans (the slices are shared and must not be changed).
func (s *Store) Traces() map[TraceID][]*Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[TraceID][]*Span, len(s.traces))
	for id, spans := range s.traces {
		out[id] = spans[:len(spans):len(spans)]
	}
	return out
}

// StoreStats counts a Store's content.
type StoreStats struct {
	Traces, Spans, MaxSpans int
	Received, Evicted       int64
}

// Stats describes the Store now.
func (s *Store) Stats() StoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StoreStats{Traces: len(s.traces), Spans: s.spans, MaxSpans: s.maxSpans, Received: s.received, Evicted: s.evicted}
}

// StartedBefore counts the stored spans that started before t: once it stops growing, the spans of the
// requests sent before t have arrived, whatever the services keep sending since.
func (s *Store) StartedBefore(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, spans := range s.traces {
		for _, span := range spans {
			if span.Start.Before(t) {
				n++
			}
		}
	}
	return n
}

func resourceNames(attrs []*commonpb.KeyValue) (service, instance string) {
	for _, kv := range attrs {
		switch kv.GetKey() {
		case "service.name":
			service = attrText(kv.GetValue())
		case "service.instance.id":
			instance = attrText(kv.GetValue())
		}
	}
	return service, instance
}

func convertSpan(ps *tracepb.Span, service, instance string) (*Span, bool) {
	name := ps.GetName()
	if ps.GetKind() == tracepb.Span_SPAN_KIND_CLIENT {
		// A call's client and server spans share a name; the client's own time is the hop (send, queue,
		// receive), so it is a stage of its own.
		name += ClientSuffix
	}
	span := &Span{Name: name, Service: service, Instance: instance,
		Start: time.Unix(0, int64(ps.GetStartTimeUnixNano())), End: time.Unix(0, int64(ps.GetEndTimeUnixNano()))}
	if copy(span.Trace[:], ps.GetTraceId()) != len(span.Trace) || copy(span.ID[:], ps.GetSpanId()) != len(span.ID) ||
		span.Trace == (TraceID{}) || span.ID.IsZero() {
		return nil, false
	}
	copy(span.Parent[:], ps.GetParentSpanId())
	for _, kv := range ps.GetAttributes() {
		if !kept(kv.GetKey()) {
			continue
		}
		value := attrText(kv.GetValue())
		if kv.GetKey() == "cairn.op" {
			span.Op = value
		}
		span.Attrs = append(span.Attrs, Attr{Key: kv.GetKey(), Value: value})
	}
	if member := span.Attr("cairn.member"); member != "" && span.Instance == "" {
		span.Instance = member
	}
	for _, link := range ps.GetLinks() {
		var ref SpanRef
		if copy(ref.Trace[:], link.GetTraceId()) == len(ref.Trace) && copy(ref.Span[:], link.GetSpanId()) == len(ref.Span) {
			span.Links = append(span.Links, ref)
		}
	}
	return span, true
}

// ClientSuffix ends the stage name of a call's client span ("storage.pipeline/Submit (client)"), which would
// otherwise share its name with the server span.
const ClientSuffix = " (client)"

// attrText writes an attribute value as text.
func attrText(v *commonpb.AnyValue) string {
	switch value := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return value.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(value.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(value.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(value.DoubleValue, 'g', -1, 64)
	default:
		return ""
	}
}
