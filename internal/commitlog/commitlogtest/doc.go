// Package commitlogtest is a single-member, in-process commitlog.Log: every proposal is committed at once, in order,
// with term 1. It keeps the commitlog promises (ordered delivery from any index, each entry once per Committed
// call, ReadIndex returning the last committed index, snapshots for compacted indexes, never discarding above
// the index storage reported through Compact), so services can be tested fast without consensus.
//
// With Config.Path set the log is durable: each proposal is appended to the file and fsynced before Propose
// returns, and Open replays the file (dropping a torn tail), so crash tests can replay the same log.
//
// Test hooks: SetProposeError makes proposals fail (as with no leader); DiscardThrough drops reported entries so
// that Committed answers older indexes with a KindSnapshot naming SetSnapshotSource's storage.
package commitlogtest
