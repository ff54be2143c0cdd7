// Package obs is what every Cairn service shares for being observed: structured logs (log/slog), the admin HTTP
// endpoint (/metrics, /health, /readyz, /livez) and OpenTelemetry tracing with its gRPC instrumentation and the
// trace-context carriers used inside proposals and NATS messages.
//
// Nothing here is global: a service builds one Telemetry and one prometheus.Registry and passes them down.
package obs
