// Package supervisor runs a set of child processes on one machine and keeps them running: the process
// manager behind `cairn up` and the reference etcd cluster of internal/tools/etcdref. It knows nothing of what the children
// are; a child is a name, an argv, an environment, a working directory, a log file and some named ports.
//
// Lifecycle: New(cfg) → Start(ctx) → Stop(ctx).
//
//   - Start launches every child in its own process group, with stdout and stderr appended to its log file.
//     A child whose spec lists DependsOn is launched only after each of those children has passed its
//     readiness check (ChildSpec.Ready, e.g. HTTPReady on a /health URL); children without dependencies are
//     launched at once. Start returns when every child is running and ready. If a child cannot be executed, a
//     readiness check does not pass within Config.ReadyTimeout, or ctx ends, Start stops whatever it launched
//     and returns the error.
//   - While running, a child that exits for any reason (a crash, kill -9, a clean exit) is relaunched after an
//     exponential backoff (Config.MinBackoff doubling up to Config.MaxBackoff, reset once the child has stayed
//     up for Config.StableAfter); its restart counter goes up by one and the rest of its process group is
//     killed first, so a crashed child leaves nothing behind that holds its ports.
//   - A child that exits with one of its ChildSpec.FinalExitCodes (a consensus member removed from its
//     cluster) is done for good: it is not relaunched, its state is StateFinished, and Config.OnFinished
//     hears of it.
//   - Add launches more children into the running set (after their dependencies, as Start does); Remove
//     stops children and forgets them (membership changes of `cairn up`).
//   - Stop sends SIGTERM to every child's process group, waits up to Config.StopTimeout for the child to exit,
//     then sends SIGKILL to the group. Dependents are stopped before their dependencies (a child is sent
//     SIGTERM once every child listing it in DependsOn has exited), so no child outlives what it needs. After Stop returns no child or grandchild of the supervisor is left
//     running. On Linux children also get SIGKILL from the kernel if the supervisor itself dies (Pdeathsig),
//     so even kill -9 of the supervisor leaves no orphans.
//
// Status: Children and Stack report each child's current pid, state, restart count, log file and ports. When
// Config.StackFile is set, the same Stack is written there as JSON (atomically, by rename) every time a child
// is launched, exits, or the supervisor stops, so the pids in it are always current.
//
// FreePorts allocates free 127.0.0.1 ports for the children before they are specified.
package supervisor
