// Package consensus is Cairn's consensus service: one member of a Raft group (go.etcd.io/raft/v3) that
// turns proposals into a committed, totally ordered, durable log of opaque entries for the member's storage.
//
// A Node is one member. New(cfg, deps) checks the configuration (deps: logger, telemetry, registry, the peer and
// Consensus listeners when the caller bound them, a dialer for the raft transport when it is not TCP), Start(ctx)
// brings the member up (from its WAL if it has one, else by bootstrapping --initial-cluster or joining an existing
// cluster), Stop(ctx) stops it. A Node implements commitlog.Log for a storage in the same process (`cairn dev`); for
// a remote storage, whose client is internal/consensusclient, the same log is served on the Consensus port:
// proposals, read index calls on the propose link (calls of internal/link) and the committed log on a framed stream
// (links.go, internal/framed), the rest as the Consensus gRPC service (server.go), which also carries etcd's
// membership operations for the frontend.
//
// # Promises
//
//   - The raft loop follows raft's README: for each Ready, the HardState, entries and snapshot go to the
//     WAL with one fsync before any message that depends on them is sent (a leader sends its appends while
//     it writes, as the README allows); committed entries are then handed on, and Advance is called.
//     Pre-vote and check-quorum are on, so a partitioned member cannot disrupt the cluster when it returns.
//     A leader or candidate ticks raft every --heartbeat-interval; a follower that hears its leader is handed
//     its ticks when it wakes anyway (tickclock.go), so an idle follower wakes for its leader's heartbeats, not
//     for its own ticks, and still starts an election at its randomized timeout after the leader's last word.
//   - Committed delivers an entry only once it is committed (fsynced on a quorum of voters) and fsynced
//     here, in index order, exactly once per call, including the empty entries of new leaders (KindEmpty)
//     and membership changes (KindConfChange, already applied by consensus). From an index the log was
//     compacted past, it first delivers one KindSnapshot naming the member whose storage holds that state.
//   - Propose fails fast with etcd's "etcdserver: no leader" when there is no leader, with "request is too
//     large" above --max-request-bytes, and with raft's other refusals as etcd's errors (leader changed,
//     too many requests); an accepted proposal may still be lost if the leader changes before it commits.
//     Data must not be empty: an empty entry is what a new leader appends.
//   - ReadIndex returns the commit index a quorum confirmed the leader held after the call began (raft's
//     ReadOnlySafe); concurrent calls share one round.
//   - The log is compacted only below what storage reported through Compact, keeping
//     --snapshot-catchup-entries below it for slow followers. A snapshot is saved to the WAL every
//     --snapshot-count applied entries; between two, once the log holds a quarter more than the catch-up
//     window (at least 1,000 entries more), the window moves up at a snapshot kept in memory only (the WAL
//     still replays from its own snapshot). Only the newest Config.LogEntriesInMemory entries below the
//     applied index stay in memory; the rest of the window is read back from the WAL (wal.Entries), so a
//     follower or a storage behind by up to the window catches up from entries, and the log's memory does
//     not grow with the window. A raft snapshot holds no state: its data names
//     the member whose storage has it (SnapshotRef) and the membership at its index. A follower that gets
//     one persists it and delivers KindSnapshot; its storage fetches the state from the named storage and
//     calls Compact(>= index).
//   - Membership changes are raft conf changes carrying the member's attributes, persisted in the log and
//     in snapshots, with etcd's IDs, errors and checks: members join as learners, a learner is promoted
//     only when caught up, and a removed member stops itself (Done closes, Err is ErrRemoved).
//
// # Needs
//
// A data directory of its own (--data-dir), reachable peer URLs, and a storage that calls Compact as it
// durably applies entries (without it the log and its memory grow without bound, as etcd's would without
// snapshots).
package consensus
