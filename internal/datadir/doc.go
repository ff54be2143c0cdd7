// Package datadir recognises what a data directory holds and locks it for the one process that uses it.
//
// Inspect tells apart an empty dir, a `cairn dev` (or restored) member dir, a `cairn up` stack dir, a bare consensus
// or storage dir, and an etcd data dir, from the files each leaves; Expect turns a mismatch into an error that says
// what the dir is and what to do with it (an etcd data dir: migrate it with `cairn snapshot restore`).
//
// Lock takes an exclusive flock on DIR/.lock, as etcd locks its WAL, and records who holds it (pid, command,
// start time) so a second process is refused at once with a message naming the running one. The kernel drops
// the lock when its holder dies, so a crash never leaves a dir locked.
package datadir
