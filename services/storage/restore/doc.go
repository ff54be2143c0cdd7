// Package restore turns a snapshot file into a member's data directory for a new cluster, as `etcdutl snapshot
// restore` does for etcd, and describes a snapshot file as `etcdutl snapshot status` does.
//
// A snapshot is a bbolt database followed by its SHA-256 (what `etcdctl snapshot save` writes, from Cairn or from
// etcd v3.5 to v3.7), or a bare database copied from a data dir (with SkipHashCheck). Both layouts keep keys in
// etcd's own `key` bucket, so a restore keeps every key's create and mod revision, version and lease, the leases
// and the compact revision: a Kubernetes apiserver's resourceVersions stay valid across a migration from etcd.
//
// # Promises
//
//   - The trailer is checked as etcdutl checks it: a file whose size is 32 more than a multiple of 512 carries a
//     SHA-256 of the rest, which must match; a file without one is refused unless SkipHashCheck.
//   - A file that is empty, cut short, corrupted, not bbolt, or of a later layout than this binary knows is
//     refused with an error saying which, and nothing is left at DataDir.
//   - Everything is written under a temporary directory beside DataDir, fsynced, and renamed into place last, so
//     a kill -9 at any moment leaves either no DataDir or a complete one (a leftover temporary directory is
//     removed by the next restore).
//   - The result is a member data dir as `cairn dev --data-dir` uses it: consensus/ (a WAL whose log starts
//     with the new cluster's membership, member and cluster IDs derived from the peer URLs and the token as etcd
//     derives them) and storage/ (the database, its consistent index set to where that log starts). It starts
//     with `cairn consensus --data-dir DIR/consensus` + `cairn storage --data-dir DIR/storage`, `cairn dev
//     --data-dir DIR`, or as member-i of `cairn up --data-dir` (restore.json tells `cairn up` its layout).
//
// Carried over as etcdutl carries them: users, roles, permissions and whether auth is enabled (the auth store
// has etcd's layout in both). Not carried over: etcd's members (the new cluster's are the restore's), alarms
// (they name the old members) and the leasekeeper claim.
package restore
