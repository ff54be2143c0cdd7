// Package eventbus carries applied records (eventpb.AppliedRecord: the key events, lease changes and compactions
// of one applied log entry) from every member's storage to the services that follow the store without being
// part of it: watchhubs and leasekeepers. The bus is core NATS (github.com/nats-io/nats.go).
//
// Promises and non-promises:
//   - A Publisher never blocks its caller (storage's apply loop): records wait in a bounded queue and are dropped,
//     counted and logged when it is full or NATS is unreachable for too long.
//   - Delivery is at most once per publisher and in order per publisher; every member publishes every record, so a
//     consumer normally sees each index several times and must de-duplicate by index. A consumer that sees a gap
//     in revisions (or suspects one) fills it from storage's History: the bus is the fast path, storage the truth.
//   - Subjects are <prefix>.applied.<member id in hex>; headers carry Cairn-Index, Cairn-Revision, Cairn-Member
//     and the W3C trace context of the storage apply span, so a watch event's trace continues the write's.
//
// Embedded starts an in-process NATS server (github.com/nats-io/nats-server/v2) for `cairn dev`, for the
// `cairn nats` child of `cairn up`, and for tests.
package eventbus
