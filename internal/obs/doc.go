// Package obs is what every Cairn service shares for being observed: structured logs (log/slog), the admin HTTP
// endpoint (/metrics, /health, /readyz, /livez) and OpenTelemetry tracing with its gRPC instrumentation and the
// trace-context carriers used inside proposals and NATS messages.
//
// Tracing follows one span contract, which `cairn trace` reads: a span per stage named "<service>.<stage>"
// (StageTracer), with the attributes cairn.service, cairn.member and, where they apply, raft.index,
// mvcc.revision, cairn.bytes, cairn.batch.size and cairn.count; a client request's root is the frontend's server
// span with cairn.op (StagedServerOptions); a batch (a group commit, a WAL fsync, a shared ReadIndex round, a bbolt
// commit) is one root span linking every sampled request it carried (Batch, StageTracer.StartBatch), sampled
// because of them (NewSampler). Stages are recorded only under a sampled span, and cost an unsampled request one
// context lookup each, no allocation. At a parent-based ratio below 1, every gRPC server and client
// (ServerOptions, DialOptions, StagedServerOptions) draws the ratio for an RPC that starts a trace (a server's
// without a traceparent, a client's without span context) before otelgrpc sees it (rootGate, gatedHandler):
// one not drawn, and a client's under an unsampled span, skips otelgrpc, so the unsampled requests and the
// services' background calls cost what they cost untraced, without an allocation. A stream relayed raw through the frontend (Watch) carries a sampled message's trace context
// in the message, in a field the frontend asks for and cuts off before relaying (relay.go), so the relay hop
// (frontend.relay) is in the message's trace and the client's bytes are unchanged. A ReadIndex round
// (consensus.read_index) has cairn.read_index.round and, on the leader, cairn.read_index.answered (the
// members whose heartbeat responses confirmed it). OTEL_TRACES_EXPORTER=none samples and records spans and
// exports none: tracing's cost inside a process, without the receiver's. The README's Tracing section lists
// the stages of each operation.
//
// Nothing here is global: a service builds one Telemetry and one prometheus.Registry and passes them down.
package obs
