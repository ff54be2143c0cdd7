// Package clustertest starts a real Cairn cluster inside one test process, on loopback: N members, each a
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
// Leasekeepers (Options.Leasekeepers): an embedded NATS carries every storage's applied records, the keepers
// start after the storages (the first to claim is active, the others stand by) and every frontend forwards
// Lease to them; each can be stopped (releasing its claim), crashed (keeping it) and started again on its URL.
// Watchhubs (Options.Watchhubs) follow the same bus and every frontend relays Watch to them; each can be
// stopped and started again on its URL, and the bus itself stopped and started again at its address
// (StopNATS, StartNATS).
//
// Logs are discarded unless CAIRN_TEST_LOG names a level (debug, info, warn, error).
package clustertest
