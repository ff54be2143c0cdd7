// Package transport carries raft messages between consensus members: on messages links (connections of framed
// messages, internal/framed, on the peer port, opened with MessagesPreamble; see consensuspb.Peer), and snapshots on
// the Peer gRPC service.
//
// # Promises
//
//   - Each member keeps, per peer, one long-lived outbound link per message class: appends (MsgApp) on one,
//     everything else (heartbeats, votes, responses, read-index traffic) on another, so a heartbeat never
//     waits behind a megabyte of entries. Snapshots (MsgSnap) travel on their own call, one per snapshot.
//   - Messages are queued per peer and class and sent in batches: whatever queued while the previous batch
//     was being written goes out in the next one, so many small messages share one frame. A link's sender
//     writes itself, with no writer goroutine in between, so a leader's appends reach the socket before its own
//     fsync takes the process's CPU.
//   - While writes flow fast (appends with entries go to a follower less than Config.CommitHold, 2 ms,
//     apart), an append without entries, which raft sends only to tell a follower a new commit index, waits
//     up to CommitHold for the next append to that follower and goes in the same frame, ahead of it: a
//     follower then wakes once per write instead of twice, and hands the commit to its storage while it
//     fsyncs the next entry. Nothing is dropped or reordered; commits still need a quorum's fsync, and
//     heartbeats (which carry the commit index as well) are never held. The cost: under such a write stream
//     a follower's storage applies a write up to one write interval (under 2 ms) later; at slower rates, and
//     after the last write, no later.
//   - A broken link is re-opened with exponential backoff. Messages that cannot be sent are dropped (raft
//     retransmits) and the peer is reported unreachable to raft; a snapshot's outcome is reported to raft
//     with ReportSnapshot.
//   - While a peer's control link is down, every Config.ProbeInterval (etcd's 30 s) a WARN "prober detected
//     unhealthy status" names the peer, the last round-trip time (how long its link took to open) and why the
//     link failed, as etcd's rafthttp prober does.
//   - A member that the receiving side knows as removed is refused with ErrRemoved, and the sender's raft is
//     told (Raft.ReportRemoved) so the member can stop itself. Messages from another cluster are refused.
//
// Send marshals messages in the caller's goroutine (raft's loop), as raft asks, so no entry is marshalled
// while the loop changes it; the entries that one Send carries to several followers are encoded once and
// shared by their frames, a large entry's data is written from the log itself (raft never changes it there), and a
// batch's messages are written as parts of its frame, not copied into it. A
// receiver decodes a batch in the link's reused read buffer (framed.Conn.ReceiveBorrowed): only what raft keeps
// is copied out of it. Received messages are handed to Raft.Process, which may block: that is how a
// slow raft loop slows its senders.
//
// Metrics are etcd's peer-network series (etcd_network_peer_*, labelled with the peer's member ID as etcd's) and
// etcd_server_heartbeat_send_failures_total; the round-trip time is timed on raft's heartbeats.
//
// Faults is a test aid: it drops messages to and from chosen members, to partition a member with the real
// transport in place.
package transport
