// Package mvcc is Cairn's state machine: etcd's multi-version key-value store on go.etcd.io/bbolt.
//
// A Store applies committed log entries (etcdserverpb.InternalRaftRequest) one at a time, in log order, and serves
// reads at any revision that has not been compacted. Its semantics are etcd v3.7's:
//   - The revision starts at 1. Every entry that changes keys (Put, a DeleteRange that deletes, a Txn with
//     effective writes, a LeaseRevoke of a lease with keys) takes the next main revision; its changes take
//     increasing sub-revisions. No-op deletes and read-only txns do not bump it.
//   - Each KeyValue carries create_revision, mod_revision, version (reset on delete) and lease.
//   - Compact(rev) keeps, of each key, the newest version at or below rev (a key deleted at or below rev
//     disappears), forgets everything older, and removes it from bbolt in the background in batches. As it walks
//     the revisions it records etcd's compaction hash (CompactHash, the newest 10, in memory), which HashKV at
//     that revision answers and which etcd's compact hash check compares across members.
//   - Leases are bookkept here (ID, granted TTL, checkpointed remaining TTL, attached keys); their clock is not.
//   - The auth store (users, roles, enabled flag, auth revision; rules in package authstate) is applied from
//     the auth requests and kept in etcd's authUsers, authRoles and auth buckets. A request whose header names a
//     user at an auth revision older than the store's is refused with ErrAuthOldRevision, changing nothing.
//
// Durability and crash safety: the log index of the last applied entry (the consistent index) is written in the same
// bbolt transaction as the data it produced. bbolt commits are batched (every BatchInterval or BatchLimit entries);
// the Raft log is the source of durability, so after a crash the store reopens at its last committed consistent
// index and the caller replays the log from the next index. Apply of an index at or below the consistent index is
// a no-op, so replay is exact.
//
// Reads see every applied entry, committed to bbolt or not: writes since the last bbolt commit are also kept in an
// in-memory buffer (ordered by revision) that reads overlay on a bbolt read transaction opened after that commit.
// A reader never sees part of an entry: Apply holds the store's write lock for one whole entry.
//
// Sealed values (Config.Opener, see internal/seal): the store keeps values as they were proposed, sealed, and
// opens them only where a value is read for a client: ranges (RangeEncoded opens each value straight into its
// answer; Range decodes and opens) and VALUE compares, which compare the opened stored value with the opened compare value. Applied
// events, History, Hash and snapshots keep the stored bytes, so every member hashes the same ciphertext. A value
// that does not open fails the read, or the apply (the store then fails and is replayed), never compares wrong.
//
// The Store does no networking and no log I/O; it is deterministic: the same entries give the same state and the
// same Hash and BackendHash on every member.
//
// If a bbolt commit fails (for example ENOSPC), the store stops: it answers every later call with the failure, and
// the caller must Close it and Open it again (which reloads the last committed state) before replaying the log.
package mvcc
