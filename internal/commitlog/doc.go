// Package commitlog is the contract between the two halves of a Cairn member: consensus, which turns proposals
// into a totally ordered, durable log of committed entries, and storage, which applies that log into MVCC.
//
// Consensus implements Log (in-process for `cairn dev` and tests, or as a gRPC client of a remote consensus
// process); storage consumes it. A Log may also implement AsyncProposer (the remote one does), so that a
// proposer need not wait for each proposal's acknowledgement. Entries are opaque bytes to consensus: only storage knows how to decode them.
//
// The promises, which every implementation keeps:
//   - An entry is delivered by Committed only after it is committed, that is fsynced on a quorum of voters
//     including this member's own log. Nothing delivered is ever taken back.
//   - Committed delivers every entry from the requested index on, in index order, each exactly once per call,
//     including empty leader entries and membership changes (marked by Kind), so the storage's applied index
//     can follow the log index without holes.
//   - If the requested index is below what the log still holds (it was compacted), Committed first delivers one
//     KindSnapshot entry whose Snapshot names a member whose storage holds that state; the storage must replace
//     its state with that member's storage snapshot before it applies the entries that follow.
//   - Consensus never discards log entries above the index the storage last reported through Compact.
//   - Errors that a client should see are gRPC status errors from go.etcd.io/etcd/api/v3/v3rpc/rpctypes
//     (ErrGRPCNoLeader, ErrGRPCTimeout, ErrGRPCRequestTooLarge, ...), so they can be passed through unchanged.
package commitlog
