// Package localstack is the multi-process local Cairn cluster behind `cairn up`: NATS, N members (each a
// consensus process and a storage process with their own data directories), the leasekeepers (2: one active,
// one standby), the watchhubs (2) and the frontends, every one its own child process of the cairn binary on
// loopback, kept running by internal/tools/supervisor.
//
// Lifecycle: New(cfg) → Start(ctx) → Stop(ctx).
//
//   - Start loads DataDir/layout.json, or creates it on the first run: the member count, the cluster token and
//     every port of every service (free loopback ports, except the first frontend's client port, which is
//     Config.ClientPort). A member's peer URLs are in its WAL, so later runs must use the same ports: they
//     come from the layout. It then starts the children in dependency order, each once the services it needs
//     answer /health: consensus members together (a leader needs a quorum), each storage after its consensus
//     member and NATS, the leasekeepers and watchhubs after every storage and NATS, the frontends after every
//     storage, leasekeeper and watchhub. Start returns when every child is ready.
//   - A child that exits (a crash, kill -9) is restarted by the supervisor with the same command line: a
//     consensus member restarts from its WAL, a storage from its database and its member's log, a frontend
//     keeps nothing. DataDir/stack.json always describes the running processes (pids, ports, log files).
//   - Membership follows etcd's while the stack runs: AddMember (etcd's MemberAdd, then the member's consensus
//     with --initial-cluster-state existing, its storage and frontend) and RemoveMember (MemberRemove, then its
//     processes stop), which `cairn up member add/remove` reach through DataDir/control.sock. A consensus
//     removed behind the stack's back (etcdctl member remove) exits with consensus.ExitCodeRemoved; the
//     supervisor does not restart it and the stack stops the member's other processes. layout.json records
//     removed and joined member numbers, so the next Start runs the same members.
//   - Stop sends SIGTERM to the frontends first, then the storages, then consensus and NATS, and returns when
//     every child has exited. Data stays in DataDir; the next Start carries on from it.
//
// Layout of DataDir: layout.json, stack.json, control.sock (while running), logs/<child>.log, member-<i>/consensus (WAL) and
// member-<i>/storage (storage.db); with Config.TLS, pki/ (ca.pem, ca-key.pem, <child>.pem and <child>-key.pem
// for every child, client.pem for etcdctl); without it, nats/ (<role>.nk, the nkey seed a storage, watchhub
// or leasekeeper proves its role on the bus with, mode 0600, and <role>.pub, what NATS lets in).
//
// With Config.Trace a `cairn trace` child (listed first) receives every other child's spans: they get
// OTEL_EXPORTER_OTLP_ENDPOINT set to its OTLP/gRPC port; Stack.TraceURL is its page.
//
// Adding a kind of service (a watchhub, a leasekeeper) is one entry in services(): its name, how many
// instances, which ports each instance needs, its command line and what it depends on.
package localstack
