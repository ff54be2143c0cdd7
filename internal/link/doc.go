// Package link is Cairn's one call layer over framed connections (internal/framed): every framed link whose
// traffic is calls and answers (the frontend's storage pipeline, storage's propose link to consensus) uses it, so
// ids, pending calls, deadlines, cancellation, the "not sent" marking and trace context are written once.
//
// A frame on a link is a uvarint header length, a header (protobuf fields, see header.go) and a body the caller
// encodes (Cairn sends protobuf messages). The header names the call (id, method), its kind (call, answer,
// cancel, end), the time the caller still waits (so the server bounds its work), the caller's W3C trace context
// when sampled (restored as the parent of the server's work, and of a span per call on both ends when spans are
// recorded) and,
// on a failed answer, the gRPC status.
//
// Client side (Client.Call): a call takes a fresh id, goes out from the caller's own goroutine (sharing a write
// with the calls sent at the same moment: framed.Conn.SendBatched) and waits for its answer; no goroutine is
// started per call. A call whose context ends sends a cancel frame and returns; one left unanswered past its
// deadline is failed by one sweep per Client. Client.Go is a call whose answer goes to a function, called from
// the link's receiving goroutine, so that nothing waits per call in flight (storage's proposals).
//
// Server side (Server.Serve): one receiving goroutine per connection hands each call to its method's Handler,
// which answers at once (the answer waits for the write that carries the answers of the calls already read) or
// runs the call on one of the connection's workers (Call.Go; workers are kept and reused), runs work that never
// waits long on one of the connection's few brief workers (Call.GoBrief, fed by a bounded queue), or answers
// later from elsewhere (Call.Context for the call's bounded context). When the server stops it starts no more calls,
// waits for those it started, and ends the connection with an end frame: every call not answered on it was not
// started.
//
// Retry safety: an error a call returns satisfies errors.Is(err, ErrNotSent) exactly when the call certainly did
// not reach the server's handler: the connection could not be opened, it was broken before the call's frame was
// queued, the server's end frame came first, or the handler refused it with a NotSent error (storage's health
// refusal, a propose link that could not be opened behind it). Everything else that breaks a call in flight is
// not marked: the call may have been carried out. The mark crosses gRPC too, as a status detail (see NotSent and
// UnaryClientInterceptor), so a decision to retry never reads an error's text.
//
// TLS: ClientConfig.TLS (a tlsconfig.Link) makes every connection of a client mutual TLS, handshaken before the
// preamble; the server's port serves the same link's Listener (framed.Serve on it), so the preamble and frames
// travel inside TLS. Plain when nil.
//
// Streams (the committed-log link, raft's peer messages) are not calls: they share internal/framed and a
// preamble on the same port, not this layer.
package link
