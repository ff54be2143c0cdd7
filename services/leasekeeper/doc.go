// Package leasekeeper is Cairn's lease service: the clock of etcd's leases, and etcd v3.7's Lease API
// (etcdserverpb.Lease: LeaseGrant, LeaseRevoke, LeaseKeepAlive, LeaseTimeToLive, LeaseLeases) on its own gRPC port.
// It checks no permissions: the frontends check every call before relaying it, so while storage's status says
// auth is enabled the keeper serves only them (package relayauth: internal TLS or Config.RelaySecret). A client's
// grant or revoke relayed by a frontend carries the auth fence the frontend checked it at (relayauth.Fence, in
// gRPC metadata), which the keeper copies into the header of the entry it proposes: storage refuses the entry
// with ErrAuthOldRevision if the auth store changed since, as it refuses a stale KV write, and the frontend
// checks the call again. The keeper's own revokes and checkpoints carry no fence.
//
// What lives where. A lease's existence, granted TTL, checkpointed remaining TTL and attached keys are storage's:
// grants, revokes and checkpoints are log entries every member applies (storage package), so every member deletes
// a revoked lease's keys in one revision and watchers see the DELETE events. The clock is the keeper's: the
// active keeper holds every lease's deadline in memory, renews it on keep-alives (which are not proposals, as in
// etcd) and, when a deadline passes, proposes the lease's revoke through storage.
//
// How a keeper learns leases: an initial load of storage's lease records, the lease changes of applied records
// on the event bus's lease subjects (internal/eventbus; lossy, and a record may come from more than one member, so
// each change is applied in log index order and copies are ignored), its own writes' answers, and a
// reconciliation with storage every ReconcileInterval.
//
// One active keeper at a time, chosen by an election the store provides (package keeperclaim): the active keeper
// renews its claim every RenewInterval and serves only while its last successful renewal is younger than
// ActiveTimeout; a standby that has seen no renewal for TakeoverTimeout (longer) claims with compare-and-swap on
// the epoch and renewal count, so it wins only if the holder really went silent. Every revoke and checkpoint a
// keeper proposes carries its epoch and storage refuses a stale one (fencing), so a keeper that lost the role
// cannot revoke anything. With Config.PeerURLs the claim is held without log writes, so an idle cluster writes
// nothing: the holder confirms it every RenewInterval with a linearizable read instead of renewing it, and a
// standby asks the peers (grpc health Check for the holder's claimant ID, SERVING while it is active; see
// liveness.go) and claims after TakeoverTimeout without a live answer, or at once when no peer is the holder it
// saw active (each answers it is another keeper, or refuses the connection: the holder's process is gone). A
// holder only the standbys lost sight of may serve until ActiveTimeout after the takeover applied, so the new
// keeper counts it as serving until ActiveTimeout after its claim was answered, however soon it claimed: how long
// a standby waits is for availability, never for safety.
// A holder with peers that knows no lease and has had no Lease API call for 5 s dozes: it stops confirming
// (an idle stack then sends no ReadIndex for the claim), still answers SERVING to the standbys and counts as
// Active, and serves the next call after one confirmation. Only the expiry and checkpoint loops' timers run
// while a lease is on the active keeper's clock. A standby answers every client call with
// keeperclaim.ErrNotActive (FailedPrecondition "not the active leasekeeper"), and the frontend moves on to the
// next keeper; when none is active (a handover), it asks them all again until one is or its --request-timeout
// has passed.
//
// Failover without early expiry (etcd's lease checkpointing). The active keeper checkpoints each lease's
// remaining TTL through the log every CheckpointInterval (in batches of CheckpointBatch, at most CheckpointRate
// entries per second), and the first keep-alive after a checkpoint first resets that stored remaining TTL to 0
// through the log, as etcd's Renew does. So a stored remaining TTL means "not renewed since", and a new keeper
// starts each lease from it (counted from when it learned of the checkpoint) or, without one, from the full TTL
// counted from when the old keeper stopped at the latest; and no deadline comes sooner than DeadlineExtension
// (the election timeout, as etcd's Promote extends by) after the takeover. No lease gets a deadline earlier than
// the one it had, long leases are not reset to their full TTL.
//
// How long an abandoned lease lives after the active keeper crashes, from its last keep-alive L to the crash C
// and on (defaults; a lease idle for CheckpointInterval before C resumes from its checkpoint, within about TTL +
// 1s of L, or DeadlineExtension after the takeover). With log renewals the standby saw the last renewal within
// RenewInterval of C and claims TakeoverTimeout after that; the lease goes at C + RenewInterval + ActiveTimeout +
// TTL, about TTL + 1.2s + (C - L). With peers and the holder's process gone (kill -9), the standby claims within
// four RenewIntervals of C (while the holder answers it is active, a standby looks every three RenewIntervals;
// see newStandbyPace) and the lease goes at the claim + ActiveTimeout + TTL, about TTL + 1.8s + (C - L);
// both under TTL + 2.5s, plus ExpiryTick and the revoke. With peers and a holder the standby only lost sight of
// (a partition), the standby first waits TakeoverTimeout: about TTL + 2.9s + (C - L), and that holder may itself
// have renewed the lease until ActiveTimeout after the claim.
//
// Expiry storms: expired leases are revoked at most RevokeRate per second (etcd's leaseRevokeRate, 1000), one
// entry per lease from a pool of workers, so other writes keep their share of the log.
//
// Lifecycle: New(cfg, deps) → Start(ctx) → Stop(ctx); Stop (safe twice) releases the claim so a standby takes
// over at once. Deps carries the logger, telemetry, the process's registry, a listener bound by the caller and
// optionally a dialer for its storage and NATS connections (tests: an in-memory network in a synctest bubble);
// the storages are reached through a storageclient.Pool that fails over only on Unavailable. Config (with RegisterFlags) holds the listen URL, storage endpoints (failed over in order), NATS URL and
// subject prefix, checkpoint and revoke rates, election timings and the admin (metrics, health) address.
package leasekeeper
