package obs

import (
	"bytes"
	"context"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

// A stream relayed raw through the frontend (a Watch stream: the frontend passes the hub's frames on without
// decoding them) carries the trace context of a sampled message in the message itself, so that the frontend
// can span its relay hop (frontend.relay) in the message's trace. The carrier is one extra protobuf field,
// written first, that only a frontend asks for and reads: RelayTraceHeader on the stream's request metadata
// asks the backend to add it; the frontend cuts it off (CutRelayTrace) before relaying, so the client's bytes
// are the backend's message without it. A message that is not sampled carries nothing, and costs the frontend
// a two-byte comparison.

// RelayTraceHeader is the metadata key a frontend that records spans sends when it opens a relayed stream: the
// backend then puts the carrier on the sampled messages of that stream, and on no other stream's.
const RelayTraceHeader = "cairn-relay-trace"

// relayTraceField is the carrier's field number: the largest protobuf allows, which no etcd message uses.
const relayTraceField protowire.Number = protowire.MaxValidNumber

// relayTraceTag is the carrier's encoded tag; relayTraceLen its payload's length: trace ID, span ID, flags.
var relayTraceTag = protowire.AppendTag(nil, relayTraceField, protowire.BytesType)

const relayTraceLen = 16 + 8 + 1

// RelayTraceRequested reports whether a relayed stream's peer asked for carriers (RelayTraceHeader in ctx's
// incoming metadata).
func RelayTraceRequested(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, RelayTraceHeader)) > 0
}

// AppendRelayTrace appends the carrier of sc to b: to write before a sampled message's own bytes.
func AppendRelayTrace(b []byte, sc trace.SpanContext) []byte {
	b = append(b, relayTraceTag...)
	b = protowire.AppendVarint(b, relayTraceLen)
	traceID, spanID := sc.TraceID(), sc.SpanID()
	b = append(append(b, traceID[:]...), spanID[:]...)
	return append(b, byte(sc.TraceFlags()))
}

// CutRelayTrace returns the span context a relayed message's carrier holds and the message without it, or
// ok false and the message unchanged when it has no carrier.
func CutRelayTrace(msg []byte) (sc trace.SpanContext, rest []byte, ok bool) {
	if len(msg) < len(relayTraceTag)+1+relayTraceLen || msg[0] != relayTraceTag[0] || !bytes.HasPrefix(msg, relayTraceTag) {
		return trace.SpanContext{}, msg, false
	}
	payload := msg[len(relayTraceTag):]
	if payload[0] != relayTraceLen {
		return trace.SpanContext{}, msg, false
	}
	payload = payload[1:]
	var traceID trace.TraceID
	var spanID trace.SpanID
	copy(traceID[:], payload[:16])
	copy(spanID[:], payload[16:24])
	sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID,
		TraceFlags: trace.TraceFlags(payload[24]), Remote: true})
	return sc, payload[relayTraceLen:], sc.IsValid()
}

// StartRelay starts the stage called name (e.g. frontend.relay) of a relayed message whose carrier held sc, as a
// child of sc's span; a no-op span when sc is not sampled or spans are not recorded.
func (s StageTracer) StartRelay(name string, sc trace.SpanContext) trace.Span {
	_, span := s.Start(trace.ContextWithRemoteSpanContext(context.Background(), sc), name)
	return span
}
