// Package traceview is the OTLP trace receiver behind `cairn trace` and `cairn bench --trace`: it takes the
// spans every Cairn service exports and answers "where did each millisecond of a request go".
//
// Receiving. A Receiver serves OTLP/gRPC (the collector's TraceService) and OTLP/HTTP (POST /v1/traces,
// application/x-protobuf or application/json as the OTLP specification encodes them, gzip or not), both with
// the official go.opentelemetry.io/proto/otlp messages. With Config.ForwardURL every request is also sent on,
// unchanged, to another OTLP endpoint (Jaeger, Tempo, a collector), from a bounded queue so a slow or absent
// downstream never slows the exporters (what does not fit is dropped and counted).
//
// Keeping. Spans are kept in memory in a Store bounded by span count (Config.MaxSpans, default 500,000: about
// 150 MB): past the bound the traces that arrived first are evicted whole.
//
// Analysing (pure: Analyze takes traces and returns a Report, no I/O). The span contract shared with the
// services: span names are `<service>.<stage>`; the root of a client request's trace is the frontend's
// server span and carries `cairn.op` (put, txn, range.linearizable, watch.event, lease.keepalive, ...), which
// is the trace's operation type (a trace whose root has no cairn.op is typed by the root's span name; one
// whose root only links to other traces is a batch and is not a request of its own; types from cairn.op are
// listed first). A batched stage (group commit, a WAL fsync of several entries, a shared ReadIndex round) is
// one span with a link to every request span it carries: the analyser counts it, and its descendants, as a
// stage of each linked request, placed under the span it links to (and so is a batch linking a batch's span:
// consensus.read_index linking a storage.read_index round's call). A span carrying cairn.op is a request of
// its own, so its links (a watch event's trace linking the write it reports) are causes, not a batch. A call's
// client span is named "<name> (client)" (ClientSuffix): its own time is the hop to the server. Per operation
// type the Report has every stage with its count and p50/p90/p99 duration, the stage's share of the
// end-to-end (root) time on the critical path, and the median and the slowest trace as waterfalls; and the N
// slowest traces overall.
//
// The critical path of a trace is the chain of spans that determined when the root ended: from a span's
// end, the child that ends last (clipped to what is left of the span's window), recursively, then the span's
// own time before that child, and so on back to the span's start. A wait stage ("<service>.wait_*") also
// takes as children the detached spans it waited for (those that outlived their parent, were under way when
// the wait began and ended before it did: consensus.commit for storage.wait_commit), so the path goes
// through the work rather than stopping at the wait. The path's segments add up exactly to the root's
// duration, so the shares of an operation type add up to 100%: that is the stacked bar of the HTML page.
//
// Showing. Report.WriteText writes the tables for a terminal; WriteHTML writes one self-contained page (inline
// CSS and SVG, no scripts, no external assets) that the Receiver also serves at `/` (and the text at
// /report.txt).
package traceview
