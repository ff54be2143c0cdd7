// Package authstate is etcd v3.7's auth store as pure data and rules: users, roles and their key permissions,
// whether authentication is enabled, and the auth revision that every change increments. It does no I/O:
// storage applies the log's auth requests to a State (Apply) and persists the users and roles it changed in
// etcd's bbolt buckets; the frontend holds a copy to check each request where it enters the system (Check,
// CheckAdmin). Errors are etcd's gRPC errors (rpctypes), so a refusal reads as etcd's.
//
// Invariants: a State changes only through Apply, on every member in log order, so every member holds the same
// users, roles, enabled flag and revision at the same applied index. Passwords are bcrypt hashes, computed by
// the frontend before proposing (as etcd's API layer does); Apply never hashes, so applying is deterministic.
package authstate
