// Package etcdref provides the real etcd, as the reference Cairn is measured against: the etcd server and
// etcdctl binaries at Version, and throwaway etcd clusters of N members on loopback.
//
// Binaries. Build returns the paths of etcd and etcdctl in BinDir ($CAIRN_ETCD_BIN_DIR if set, else
// os.UserCacheDir()/cairn/etcd-<Version>). A binary that is missing there is built from the Go module proxy
// with the local go command, in a throwaway wrapper module (etcd's server module has replace directives, so
// `go install module@version` refuses it). The build runs once per machine: concurrent callers, in one
// process or many, serialise on a file lock in BinDir, and each binary appears there by atomic rename, so a
// caller either sees a complete binary or builds it. The first build takes a minute or two; later calls only
// stat two files.
//
// Clusters. New(cfg) → Start(ctx) → Stop(ctx). Start allocates free 127.0.0.1 ports, runs every member as a
// child of a internal/tools/supervisor Supervisor (own process group, log file per member, restart after a crash with its
// data kept), and returns once every member's /health answers 200, or fails at Config.StartTimeout.
// Endpoints lists the client URLs. Stop terminates every member and removes the data when the cluster made
// its own directory.
//
// Tests use StartCluster, EtcdBinary and Etcdctl, which build on demand, fail the test on error and clean up
// with t.Cleanup. Nothing here reads /work/etcd-bin or any prebuilt binary outside BinDir.
package etcdref
