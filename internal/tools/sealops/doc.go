// Package sealops is the operator side of encryption at rest (internal/seal), behind `cairn encryption status`,
// `cairn encryption rewrap` and `cairn snapshot decrypt`.
//
// Status and rewrap work on a running cluster through etcd's API only: a Maintenance.Snapshot (the store as
// storage keeps it, values sealed) tells what sealed each stored value; rewrap then writes the current value of
// every key whose latest value is not under the primary key again, through the log, in bounded batches (a Txn
// per batch whose compares on mod_revision make a concurrent client write win). Each rewritten key gets a new
// revision, as Kubernetes' storage migration does. Rewrap is resumable by running it again: keys already under
// the primary key are skipped. Old revisions keep their old ciphertext until compaction: a key may be removed
// from the configuration once status shows no value under it (storage refuses to start otherwise).
//
// DecryptSnapshot turns a sealed snapshot file into a plain, etcd-compatible one.
package sealops
