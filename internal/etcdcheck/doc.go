// Package etcdcheck holds the request checks etcd's gRPC API layer makes before a request reaches Raft, with
// etcd's exact gRPC errors (rpctypes): empty keys, invalid sort options, ignore_value/ignore_lease misuse, too many
// ops in a txn, puts and deletes overlapping in a txn (duplicate key), and the request size limit. The frontend
// calls them on every request; storage calls them again before proposing, so a bad request never reaches the log.
//
// Checks that depend on state (a lease that does not exist, a compacted revision) are made when the request is
// applied, as in etcd, and are not here.
package etcdcheck
