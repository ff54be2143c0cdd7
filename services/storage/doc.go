// Package storage is a Cairn member's storage service: it applies the member's committed log into MVCC
// (package mvcc, on bbolt) and serves the Storage gRPC API (api/storagepb) that the frontend, watchhub
// and leasekeeper use, through internal/storageclient.
//
// Writes: Submit checks a request as etcd's API layer does (package etcdcheck) and against the backend quota,
// gives it a cluster-unique request ID, wraps it in a storagepb.Entry (with the caller's trace context) and
// proposes it to the commitlog.Log. It answers when this storage applies that entry, with etcd's response and
// real revision; the apply is visible to reads before its bbolt commit, and commits are batched, because the log
// is the source of durability. A proposal the log refuses returns the log's error; one not applied within
// RequestTimeout returns rpctypes.ErrGRPCTimeout.
//
// Reads: Range with serializable=false (and read-only Txn) first get a ReadIndex from the log and wait until it
// is applied, so a read after an acknowledged write sees it. History, Hash, BackendHash, Snapshot, Status and
// the lease queries are served from local state. The frontend's hot path, Submit and Range, comes on pipeline
// connections on the same port as gRPC (told apart by their preamble, storagepb.PipelinePreamble; calls of the
// internal/link layer, with SubmitRequest and RangeRequest bodies): a serializable one-key range is answered by the
// connection's reading goroutine itself, anything else on a worker; a write that needs nothing but its apply
// (a Put, DeleteRange or writing Txn, values not sealed) is proposed by one of the link's few brief workers
// (link.Call.GoBrief), without waiting for consensus's acknowledgement (commitlog.AsyncProposer), and answered
// by the apply loop, so no goroutine waits, or is started, per write in flight; answers share writes while calls keep coming. A plain range is answered in its wire encoding written straight from the stored KeyValues
// (mvcc.Store.RangeEncoded) into a pooled buffer that is written out as it is, so a LIST is copied once and never
// decoded or re-encoded (with encryption at rest, each value is decrypted into that buffer instead of copied). When storage stops, each pipeline answers the calls it started, then ends with the link's
// end frame (Unavailable "cairn storage unavailable: stopping") so the frontend knows the rest were not started.
// Every refusal before a call starts (unhealthy, stopping) is marked link.NotSent, on the pipeline and on gRPC.
//
// The apply loop consumes Log.Committed from the store's applied index + 1, in order, and hands every change to
// an AppliedSink. The durable (bbolt-committed) applied index is reported to the log through Compact, at most
// every LogCompactInterval. A KindSnapshot entry makes storage fetch the named member's Snapshot stream, replace
// its database atomically (temp file, fsync, rename) and carry on.
//
// Leasekeeper election and fencing (package keeperclaim): ClaimKeeper proposes a KeeperClaim entry, which every
// member applies with the same compare-and-swap on the stored KeeperState (holder, epoch, renewals), kept in the
// bbolt meta bucket; KeeperStatus reads it linearizably. SubmitFenced carries a keeper epoch in the entry, and
// apply refuses a request whose epoch is not the stored one with keeperclaim.ErrStaleEpoch, changing nothing.
// LeaseRecords streams every lease's record (granted TTL, checkpointed remaining TTL and the log index of that
// checkpoint) linearizably; LeaseTimeToLive and LeaseLeases are linearizable too. A Submit's response carries the
// log index of its entry.
//
// Auth: Submit takes etcd's auth requests (the frontend has hashed passwords and checked permissions); the
// request header's username and auth revision are kept in the entry for the apply-time check (mvcc). A
// response to an auth request carries the auth revision after it; Status reports the auth revision and enabled
// flag (frontends refresh their copy when they change) and AuthState returns the whole auth store, linearizably.
// A read a frontend checked (the pipeline's RangeChecked, a read-only Txn's Submit) carries the read fence of
// the frontend's copy of the auth store in its header; after the read barrier (linearizable) or at once
// (serializable) a fence below this storage's is refused with ErrAuthOldRevision (authFence), so the frontend
// checks it again against a fresh copy; an anonymous write whose header carries a fence is refused at apply
// once auth is enabled. Every storage keeps the simple tokens of the Authenticate entries it applied, in memory as etcd's members do
// (dropped when their user is deleted or changes password, when unused for the asker's TTL, and on restart);
// AuthToken answers whose a token is, so any frontend accepts a token another issued.
//
// Failures: when a bbolt commit fails (a full disk), the store stops; storage turns unhealthy (/health says why),
// refuses requests with codes.Unavailable, reopens the database at its last commit and replays the log from there,
// retrying until commits succeed again. Acknowledged writes are in the log, so none is lost. Writes past the
// quota raise etcd's NOSPACE alarm and are then refused with rpctypes.ErrGRPCNoSpace until it is disarmed.
//
// Auto-compaction (autocompact.go) is etcd's v3compactor, periodic or revision mode; every storage runs it and only
// the one whose member leads raft proposes, a plain Compaction entry. Corruption checks (corrupt.go) are etcd's:
// with InitialCorruptCheck, Start compares HashKV with the peers' storages and fails with ErrCorrupt on a
// mismatch; with CompactHashCheckEnabled the leader's storage compares the hashes its compactions recorded
// (mvcc.CompactHash) with its peers' and raises the CORRUPT alarm of the members that differ through the log, after
// which every member refuses writes with rpctypes.ErrGRPCCorrupt (mvcc's alarm refusal). A sealed value that fails
// authentication raises this member's CORRUPT alarm too, once (again only after a disarm).
//
// Encryption at rest (Deps.Keyring, package seal): Submit seals a write's values (and a txn's value compares)
// before proposing, so the log, its snapshots, bbolt, Snapshot and the applied records hold ciphertext and every
// member stores the same bytes; values are opened where they leave toward a reader (ranges and compares in mvcc,
// prev_kvs and History here). A provider that does not answer fails the call with Unavailable (retryable), a
// value that fails authentication with DataLoss, logged as an ALARM and counted (cairn_storage_seal_open_failures_total).
// New reads the database read-only first and refuses to start, changing nothing, when a stored value names a key
// the configuration lacks or a sample of the newest values does not open, and, without a keyring, when the newest
// values are sealed (they would be served as ciphertext).
//
// Lifecycle: New(cfg, deps) → Start(ctx) → Stop(ctx) (safe twice). Deps carries the logger, telemetry, registry,
// a listener bound by the caller, the Log to apply and the AppliedSink. Assemble builds a member's storage the one
// way the binary, `cairn dev` and the test clusters do: its member ID asked of the log, its records published on
// the NATS bus (Member.Stop flushes the publisher after the storage stops).
package storage
