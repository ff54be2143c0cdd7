// Package testcluster starts a real Cairn cluster inside one test process, on loopback: N members, each a
// consensus node (consensustest, with real WALs and the Consensus gRPC API) and a storage service (real bbolt)
// that applies that member's log, plus M frontends serving the etcd API. Storages reach their consensus through
// consensusclient over loopback gRPC, as separate processes do (`cairn up`), or, with Options.InProcessLog,
// through the in-process *consensus.Node, as `cairn dev` wires them.
//
// Start(t, opts) returns once a write through every frontend succeeds; everything stops when the test ends
// (or at Stop). Frontend i is named after member i, so it speaks for that member in Status, HashKV and Snapshot,
// and consensus publishes its URL as the member's client URL (MemberList and `etcdctl endpoint status
// --cluster` find every member). Frontends discover storages from consensus membership.
//
// Faults: a member's consensus can be stopped, killed (unsynced WAL writes lost) and restarted; its storage
// stopped, wiped (so it must catch up from the log or another member's snapshot) and started again; a frontend
// stopped and started. Addresses stay the same across restarts. Client returns a go.etcd.io/etcd/client/v3
// client of the frontends.
//
// Later services (watchhub, leasekeeper) add themselves here: start them after the storages and pass their
// URLs to the frontends through Options.ConfigureFrontend or their own Options fields.
//
// Logs are discarded unless CAIRN_TEST_LOG names a level (debug, info, warn, error).
package testcluster
