// Package wal is consensus's write-ahead log: the durable copy of a member's raft log, HardState and
// snapshot metadata, from which the member rebuilds its raft storage on restart.
//
// # Layout
//
// A WAL is a directory of segment files named <seq>-<firstIndex>.wal (both 16 hex digits): seq counts
// segments from 0 and firstIndex is the index the segment's first new entry was expected to have. Segments
// are preallocated to Options.SegmentSize where the file system supports it, so an fsync rarely has to
// update file metadata; the zeros after the last record mean "nothing more". Each segment starts with a
// preamble (the WAL's metadata, the latest snapshot and the latest HardState) so that removing older segments
// never loses state.
//
// Every record is framed as
//
//	u32 payload length | u32 CRC-32C of (type, payload) | u8 type | payload
//
// (little endian) and holds one of: metadata, a raft entry, a HardState, or a snapshot.
//
// # Promises
//
//   - Save writes all its records with one write and, when asked to sync, one fdatasync: many entries share
//     one fsync (group commit). When Save returns nil after syncing, everything it was given is durable.
//   - Open replays every segment. Entries follow raft's rule: an entry with index i replaces any earlier
//     entry with index >= i. A snapshot record drops the entries it covers (and, for a snapshot received from
//     a leader, every entry before it). Open returns the newest snapshot, the newest HardState and the entries
//     after the snapshot, which must be contiguous.
//   - A broken record in the last segment (short, cut off, or failing its CRC) after which no valid record
//     follows is a torn write from a crash: Open truncates the segment there and the WAL continues. A broken
//     record that is followed by a valid one, or any broken record in an older segment, is corruption: Open
//     refuses with an error wrapping ErrCorrupt that names the file and the byte offset.
//   - Entries and Term read entries back from the segment files, from FirstReadable (the first entry after
//     the newest snapshot, or after what Forget dropped) to the last: the WAL keeps each entry's segment,
//     offset and term (24 bytes an entry), not the entry. A record read back is checked (CRC, index, term)
//     before it is returned.
//   - ReleaseTo removes whole segments whose entries all lie at or below an index covered by a saved
//     snapshot and below FirstReadable; the newest segment is never removed.
//
// Limitation: a crash that persisted a later page of the last, unsynced batch but not an earlier one looks
// like a broken record followed by a valid one, and is reported as corruption. Refusing to start is the safe
// answer; such a tail was never acknowledged, so truncating the segment at the reported offset repairs it.
//
// A WAL is used by one goroutine at a time (the raft loop); its methods are nonetheless safe to call
// concurrently.
package wal
