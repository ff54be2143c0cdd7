// Package consensustest starts real consensus clusters (real WALs, real gRPC on loopback, or on an in-memory
// network inside a synctest bubble: Options.Network) inside a test, and offers a small state machine that
// consumes a member's committed log the way storage does.
package consensustest
