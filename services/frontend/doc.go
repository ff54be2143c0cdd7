// Package frontend is Cairn's frontend service: the etcd v3 API (the gRPC services of
// go.etcd.io/etcd/api/v3/etcdserverpb, and etcd's grpc-gateway JSON API at /v3/...) on the client URLs, in
// front of the members' storage and consensus services, the watchhubs and the leasekeepers. It keeps no state
// of its own: several frontends may run side by side, and a restarted one loses nothing.
//
// New(cfg, deps) → Start(ctx) → Stop(ctx) (safe twice). Deps carries the logger, telemetry, the registry /metrics
// serves (a process running several services passes the one they all report to) and client and metrics
// listeners bound by the caller. ClientURLs reports the bound URLs.
//
// # Routing
//
//   - Every request is first checked as etcd's API layer checks it (package etcdcheck: empty keys, sort
//     options, --max-txn-ops, overlapping txn ops, --max-request-bytes), with etcd's errors. The gRPC server
//     takes messages up to --max-request-bytes + 512 KiB, as etcd's does, so a slightly oversized request gets
//     "etcdserver: request is too large" and a much larger one gRPC's ResourceExhausted.
//   - Writes (Put, DeleteRange, a Txn with writes, Compact, Alarm activate/deactivate) go to a storage's
//     Submit, the raft leader's member's storage first (its proposal needs no forwarding). A write is tried on
//     another storage only when it certainly was not proposed (no connection could be made, or the storage
//     refused it before proposing); when the connection breaks while it is in flight the client gets etcd's
//     "request timed out, possibly due to connection lost", never a duplicate.
//   - Linearizable point reads (a Range of one key or with limit 1, a count, a read-only Txn) go to the
//     leader's storage first, whose ReadIndex needs no forwarding; linearizable ranges that may return many
//     keys (a LIST) and serializable reads go to the nearest storage (the home member's, else the shortest
//     round trip), so big reads spread over the members. Every storage makes a linearizable read wait for a
//     ReadIndex of its own. Reads, MemberList, Status and the other idempotent calls are tried on the
//     next replica when one is unavailable.
//   - Cluster calls and MoveLeader go to consensus (the leader's first); MoveLeader is forwarded to the
//     leader whichever member this frontend speaks for.
//   - Watch streams are relayed to one watchhub each (round robin over the --watch-endpoints URLs and over
//     every address a URL's host resolves to, looked up again every 5 s: a compose service scaled to N hubs is
//     one URL whose N replicas all get streams, those added later included); a failing hub ends the client stream
//     with codes.Unavailable so etcd clients resume on another. A relayed stream takes at most 64 KiB from its
//     hub ahead of its client, so a relay that falls behind holds its hub back (which then merges each
//     watcher's waiting revisions) rather than a backlog of its own. Frames are relayed as bytes, never
//     decoded; the frontend asks the hub for relay batches (wiremsg.RelayBatchHeader), and a hub that promises
//     them sends several responses per frame, each relayed to the client as its own message, so the client
//     sees the messages the hub would have sent it directly, at a gRPC message's cost per batch between hub
//     and frontend rather than per response. A hub also stamps each event response in a batch with when its
//     watcher's lag started, and the relay holds the hub's --max-watch-lag on what it sends: a response that
//     grew late in the relay's buffers is not sent, and its watch is canceled as the hub would have canceled
//     it (watchlag.go). Lease calls and keep-alive streams go to the
//     active leasekeeper: a keeper that is unavailable or answers FailedPrecondition "not the active
//     leasekeeper" is passed over. With no --watch-endpoints / --lease-endpoints those services answer
//     codes.Unimplemented.
//
// # Replicas
//
// A pool keeps ConnsPerStorage warm gRPC connections to every storage (from --storage-endpoints and from
// every member's storage URL in consensus membership) and one to every consensus endpoint, and probes each
// every ProbeInterval (sooner after a failure; up to 4 times less often while rounds see no change, so an idle
// cluster is not asked 36 times a second) for health, leader, term and membership. Routing reads an
// immutable view of the last probe round without locks. A replica that fails a call is routed around at once.
// Range and Submit, the hot path, always travel on a pipeline to each storage (storageclient.Pipeline: a call
// of the internal/link layer, a frame each way on two long-lived connections on the storage's port, no gRPC call
// per call) with the same answers and errors as the unary calls; when spans are recorded
// (OTEL_EXPORTER_OTLP_ENDPOINT set) each call gets a link span on both ends, so a traced run measures the same
// path as an untraced one. Each call carries its deadline (the client's, bounded by RequestTimeout +
// ProbeInterval), so no timer is set per call. Whether a failed write may go to another replica is decided by
// the link's typed mark alone (errors.Is(err, link.ErrNotSent), route.go), on the pipeline and on gRPC alike.
// A Range answer is relayed to the client as storage encoded it, never decoded nor copied: the pipeline keeps it
// in the frame it arrived in (storageclient.Pipeline.RangeEncoded) and the client server's codec (wiremsg) sends
// the frontend's header fields followed by those bytes, which the client decodes as one message with the two
// headers merged (kvServer.relayRange).
//
// # Answers as etcd's
//
// Response headers carry the cluster ID, the ID of the member whose storage answered, that member's raft
// term and the storage's revision. The home member (the member named like the frontend, else a sticky
// nearest one) is the member this frontend speaks for where etcd speaks for itself: Status (version "3.7.3"),
// HashKV, Hash (the storage's hash of its whole database; Cairn's own number, since its bbolt layout is not
// etcd's, equal on members that applied the same entries), Snapshot (the storage's database followed by its
// SHA-256, as etcdctl snapshot save expects) and Defragment (a real bbolt compaction in that storage). Downgrade
// answers as etcd does when no downgrade is possible.
//
// # Auth
//
// etcd's 17 Auth RPCs with etcd v3.7's semantics and errors (auth.go). The auth store is storage's (package
// authstate, applied from the log into etcd's authUsers/authRoles/auth buckets): changes are proposed like any
// write, passwords hashed with bcrypt at --bcrypt-cost first; UserGet, UserList, RoleGet, RoleList and
// AuthStatus answer from a linearizable read of it. Authenticate checks the password against such a read, then
// proposes an Authenticate entry carrying the auth revision it checked at (refused and retried if the store
// changed meanwhile, as etcd) and issues a token at the revision it was applied at: --auth-token simple (etcd's
// "<prefix>.<index>", --auth-token-ttl; every storage records it when applying the entry, and a frontend asks
// the storages about a simple token it did not issue, refusing those of deleted users) or jwt (etcd's claims,
// accepted by every frontend with the same keys; package authtoken). On a stream, a copy saying "disabled"
// older than 50 ms is read again when a request carries a token (auth may have been enabled through another
// frontend); a unary call with the copy saying "disabled" costs one atomic load and is fenced by storage
// instead (below). With --client-cert-auth a request without a token is
// the user its certificate's CN names, except through the gateway, as etcd.
//
// The gate (authgate.go) keeps a copy of the auth store, read at start, when a probe shows another auth
// revision or enabled flag, after each change made here and when a token is newer than the copy. Every request
// is checked where it enters, in the gRPC interceptors, before any handler forwards it (authcheck.go, etcd's
// rules): KV reads, writes, prev_kv, every compare and op of a txn (nested too), RangeStream; root only for
// Compact, member changes, Alarm changes, Defragment, Hash, HashKV, Snapshot, MoveLeader, Downgrade and user
// and role management; a named user for everything else; lease revoke, keep-alive and put with a lease need
// write on the lease's keys (time-to-live with its keys and leases read), read from storage. A Watch create is checked as
// the frontend relays it and refused as etcd refuses it (created and canceled, watch ID -1, "permission
// denied"); each keep-alive too, after it is read (never the stream as it opens, which would race the client's
// first Send), ending the stream with etcd's error once the keeper has answered the requests before it; the gateway and the Lock and Election recipes go through the same gRPC server, so the same checks.
// A write carries its user and token revision to storage, which refuses it with ErrAuthOldRevision if the
// store changed since (etcd's apply-time check); an anonymous write let through on a copy saying "disabled"
// carries the copy's read fence and is refused if auth is enabled when it is applied. A read (Range, a
// read-only Txn, RangeStream's first chunk) is checked by fencedRead (authfence.go) and carries the read fence
// of the copy it was checked against (authstate.State.ReadFence): storage refuses it with ErrAuthOldRevision if
// its own fence is higher once it has applied the read index, and the frontend reads the store again and checks
// the read again, so a revoke made through another frontend holds for the next linearizable read here, as
// etcd checks a read after its barrier. A lease grant or revoke, which the leasekeeper proposes, is checked by
// fencedCall the same way and carries the fence it was checked at to the keeper (relayauth.Fence, gRPC
// metadata: the caller's user and the copy's auth revision, or for an anonymous call the read fence of a copy
// saying "disabled"); the keeper copies it into its entry's header, the field a KV write's fence travels in, so
// storage refuses it with ErrAuthOldRevision as it refuses a stale write, and the frontend checks it again
// against a fresh copy. Keep-alives, TimeToLive and Leases propose nothing (a keep-alive renews the keeper's
// clock in memory; the others read): they are checked against the copy at the moment of the call, as etcd
// checks them against the serving member's local auth store (checkLeaseRenew, checkLeaseTimeToLive,
// checkLeaseLeases), so a change made through another frontend holds for them once a probe, or a token newer
// than the copy, has brought it here (at most ProbeInterval). A permission-denied refusal is confirmed against a fresh read of the
// store, so a grant made through another frontend is seen at once. Calls relayed to watchhubs and leasekeepers
// carry the relay secret (Config.RelaySecret, package relayauth): with auth on, those serve only frontends.
// grpc.health.v1 is never checked.
//
// # Lock, Election, health
//
// etcd's v3lockpb.Lock and v3electionpb.Election services (api/v3lockpb, api/v3electionpb: etcd's protos, so
// the wire names are etcd's) are etcd's server-side recipes: client/v3's concurrency package over an etcd
// client of this frontend's own gRPC server (the gateway's in-memory connection), carrying the caller's token,
// so the recipes' calls are routed and checked as the caller's own. grpc.health.v1.Health answers for the
// server ("") SERVING while the last view knows a raft leader, NOT_SERVING otherwise and once Stop begins.
//
// # HTTP
//
// gRPC and HTTP share each client port (cmux, as etcd: HTTP/2 to gRPC, HTTP/1 to the gateway), so gRPC keeps
// its native server. An https:// client URL serves TLS (package tlsconfig: --cert-file, --key-file,
// --trusted-ca-file, --client-cert-auth) as etcd serves it: one HTTP server, HTTP/2 requests of content-type
// application/grpc to the gRPC server (its ServeHTTP), everything else to the gateway and admin handlers. The
// gateway reaches the gRPC server over an in-memory connection, whatever the client ports serve. Besides /v3/..., each client URL and each --listen-metrics-urls URL serves /metrics,
// /version, /health (etcd's: healthy only with no alarm, a leader and a working linearizable read; ?exclude=
// and ?serializable=true as etcd), and /readyz and /livez with etcd's named checks. /metrics has etcd's
// client-API series: grpc_server_* for every RPC, unary and streaming (the grpc-ecosystem middleware etcd uses),
// and etcd_network_client_grpc_{sent,received}_bytes_total.
package frontend
