// Package watchhub is Cairn's watch fan-out: a stateless service that follows the store's applied revisions
// and serves etcd's Watch API (etcdserverpb.Watch) to any number of clients. More hubs mean more watchers;
// a hub keeps nothing that another hub or storage cannot give back. It checks no permissions: the frontends
// check every Watch create before relaying it, so while storage's status says auth is enabled the hub serves
// only them (package relayauth: internal TLS or Config.RelaySecret) and refuses direct clients.
//
// # Data flow
//
//	storage ×N ──NATS (eventbus, lossy, duplicated)──▶ feed ──sequencer──▶ window + groups ──▶ streams
//	     ▲                                               │
//	     └──────── History (gaps, catch-up), Status ─────┘
//
// The feed takes every member's records from the bus, puts them in revision order and drops duplicates
// (sequencer, pure), and fills every gap from storage History: a revision jump on the bus, or a stalled tail
// (a revision storage's Status reported one poll ago that the bus has not delivered). Contiguous revisions go
// to a bounded window of recent revisions and are fanned out to the synced watchers.
//
// Watchers with the same spec (range, filters, prev_kv, fragment) and position share a group: an event is
// matched once per group (single keys by map, ranges by interval tree) and encoded once per group, or once
// for all the groups that receive the same bytes at a revision; each watcher's response is its watch ID
// followed by the shared bytes (a gRPC codec writes them unchanged). The streams are split into GOMAXPROCS
// shards: the feed's goroutine matches and encodes a run of revisions, and one goroutine per shard queues it
// on the shard's streams, revision by revision, so the fan-out uses the hub's cores while every stream gets
// its responses in revision order (fanout.go).
// Every stream has one sender goroutine that writes its responses in order; when it finds several live
// responses of one watcher waiting (the stream fell behind), it writes them as one response carrying their
// revisions in order, as etcd batches revisions for a watcher that is behind (merge.go: the shared bytes are
// concatenated, nothing is encoded again), so a hub under load sends fewer, larger messages instead of falling
// further behind. On a stream a frontend relays (it asks, wiremsg.RelayBatchHeader) the sender writes the
// responses of each flush as relay batches of up to 16 KiB, one gRPC message each, which the frontend splits
// into its client's messages (relaybatch.go); each event response in them is stamped with when its watcher's
// lag started, so that the frontend holds the lag bound on what waits in the relay's buffers too. A watcher that starts in the past,
// or whose stream cannot take more (more than WatcherBufferResponses responses or StreamBufferBytes bytes
// unwritten), catches up on the sender from the window, then from storage History below the window, in
// batches of at most 1000 revisions (as etcd's unsynced watchers do), and rejoins its group at the head.
// Watchers of one stream with one spec at one position catch up as a cohort: read and encoded once.
//
// # Promises
//
//   - Watch semantics are etcd v3.7's: many watches per stream; watch IDs chosen by the server or the client,
//     a duplicate refused (created and canceled, watch ID -1, etcd's reason); key, range, prefix and from-key;
//     start revision in the past (window or storage history), 0 (after the hub's head) or in the future;
//     NOPUT/NODELETE; prev_kv; progress_notify every ProgressNotifyInterval to idle synced watchers; a
//     ProgressRequest answered (watch ID -1, header at the head) only when every watcher on the stream is synced;
//     fragments cut as etcd cuts them; a start below the compact revision answered created, then canceled with
//     compact_revision (header revision 0). Headers carry the cluster ID, member and term of the storage last
//     heard from. A stream opened with client/v3's WithRequireLeader ("hasleader") is refused, or ended, with
//     etcd's "no leader" once storage has reported no leader for three seconds.
//   - Every watcher receives each event of its range exactly once, in revision order, with no gap: the window
//     is contiguous, a watcher is live only from the head it caught up to, and a response carrying revision R
//     (events or progress) is written only after every earlier one for that watcher. A client that resumes at
//     its last mod_revision+1 (client/v3 does) on this hub or another loses nothing.
//   - A slow watcher never holds up others and costs bounded memory: its queue is bounded, and past it the
//     watcher reads from the window and storage on its own stream's sender. One whose next revision has been
//     compacted is canceled with the compact revision. One more than MaxWatchLag behind the head (the age of
//     its oldest unsent revision at the hub) is canceled with a reason, so its client re-watches (lag.go).
//   - A hub follows the store only while it has watch streams: then it tells the storages every second that it
//     needs the applied records (eventbus.AnnounceInterest); without streams it neither announces nor fills, so
//     when no hub is watched the storages publish nothing; it drops undecoded what they still send, and empties
//     its window at its next storage poll, so an idle hub holds no revisions. Its first stream wakes it: the
//     gap is filled from history before any watch is created, or, when larger than the window, skipped (there
//     is no watcher to miss it; a watch from the past reads it from storage history).
//   - Losing the bus only adds latency (revisions come from storage every StoragePollInterval, up to 4 times
//     less often while the store stands still); losing a
//     storage fails over to the next endpoint; stopping the hub ends its streams with Unavailable.
//   - A sampled write's watch event has a trace of its own (eventTrace): a watchhub.event root linked to the
//     apply span whose context the NATS headers carried, with the hub's stages under it. On a stream whose
//     frontend asked for it (obs.RelayTraceHeader), the event's frames start with the root's trace carrier
//     (obs.AppendRelayTrace), which the frontend cuts off before relaying and spans as frontend.relay.
//
// "Now" is storage's: before creating a watch the hub asks storage for its current revision (one Status call
// for every create waiting at that moment) and waits until its head has reached it, so a watch created after a
// write was acknowledged does not receive it and its created header carries etcd's revision. If storage or the
// bus does not answer within StorageTimeout, the watch is created at the hub's head (later, never earlier).
//
// # Needs
//
// One or more storages (StorageEndpoints) serving History and Status, read through a storageclient.Pool that
// fails over to the next storage unless the answer holds for all (compaction, a bad request), and the NATS bus
// they publish on.
//
// Lifecycle: New(cfg, deps) → Start(ctx) → Stop(ctx) (safe twice). Deps carries the logger, telemetry, registry
// and a listener bound by the caller.
//
// Sealed values: bus records carry values sealed as storage keeps them; a hub with Deps.Keyring (the storages'
// encryption configuration) opens them before they enter the sequencer, and drops a record that does not open,
// leaving a gap that History (opened by storage) fills.
package watchhub
