// Package eventbus carries applied records (eventpb.AppliedRecord: the key events, lease changes and compactions
// of one applied log entry) from every member's storage to the services that follow the store without being
// part of it: watchhubs and leasekeepers. The bus is core NATS (github.com/nats-io/nats.go).
//
// Promises and non-promises:
//   - A Publisher never blocks its caller (storage's apply loop): records wait in a bounded queue and are dropped,
//     counted and logged when it is full or NATS is unreachable for too long.
//   - Delivery is at most once per publisher and in order per publisher. Every member's storage is given every
//     record; with PublisherConfig.TakeTurns (as Cairn's storages run) they take turns, so normally one member's
//     publisher sends each record once: the lowest member ID whose heartbeat (every 200ms, 400ms while idle,
//     with how far it has been given) shows it live and not behind. The others hold their newest records and, when
//     their turn comes (the sender went silent or fell a TakeoverAfter behind), send those first, so a takeover
//     leaves no gap in the usual case. Those standing by send a standby heartbeat only every 2 s, enough to keep
//     the members above them from taking over too: the next member takes over within a second; when the next is
//     gone as well, the one after it within 5 s. In an idle cluster a member standing by does not tick: it wakes
//     when its turn could come (TakeoverAfter after the sender's last heartbeat) or its standby heartbeat is due.
//     While turns change, two may send for a moment: a consumer must de-duplicate by index. A consumer that sees a
//     gap in revisions (or suspects one) fills it from storage's History: the bus is the fast path, storage
//     the truth.
//   - With PublisherConfig.OnlyWhenWanted (as Cairn's storages run), applied records are sent only while a
//     consumer has announced on <prefix>.interest within InterestTTL (3s) that it needs them (AnnounceInterest):
//     a watchhub does, every second, while it has watch streams. With no watch stream anywhere, a write costs no
//     bus work at all (gauge cairn_eventbus_records_wanted, counter cairn_eventbus_unwanted_records_total). A
//     consumer that starts announcing fills what was not sent from storage's History, as for any other gap.
//   - Lease changes also go, stripped to an eventpb.LeaseBatch, on <prefix>.leases.<member>: every record that
//     changes a lease, and at most every 100ms while the store changes, the position of the newest record; a
//     leasekeeper reads only that (SubscribeLeaseChanges).
//   - A message is an eventpb.AppliedBatch: the records a publisher had queued when it sent (one when the store is
//     quiet, up to 512 under load, so NATS and every consumer handle far fewer messages than records; nothing
//     waits to fill a batch). Subjects are <prefix>.applied.<member id in hex>; headers carry Cairn-First-Index,
//     Cairn-Index (the last), Cairn-Revision and Cairn-Member, so a consumer can drop a copy it has already seen
//     without decoding it. Each record carries the W3C trace context of its storage apply span, so a watch
//     event's trace continues the write's.
//
// Locked down (EmbeddedConfig.TLS, as `cairn up --tls` and every --internal-cert-file run it), the bus is TLS
// with client certificates, and nats-server's own authorization decides who may do what: a certificate's URI
// SAN RoleURI(role) maps it to that role's user (verify_and_map), storages alone publish applied records,
// lease changes and turns, watchhubs alone read applied records and announce interest, leasekeepers only read
// lease changes. Without role certificates (EmbeddedConfig.RoleKeys, as a plain `cairn up` and `cairn dev` run
// it), the same roles are proven with nkeys: LoadOrCreateRoleKeys keeps a seed per role (mode 0600), the
// server knows only the public keys, and a process connects with NkeySeedFile. The server's refusals (TLS
// handshakes, unproven roles, publishes and subscriptions outside a role) are logged and counted.
//
// Embedded starts an in-process NATS server (github.com/nats-io/nats-server/v2) for `cairn dev`, for the
// `cairn nats` child of `cairn up`, and for tests.
package eventbus
