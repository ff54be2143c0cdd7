// Package consensusclient is the client of a remote consensus member (the Consensus service of
// api/consensuspb, and the links beside it). A Client implements commitlog.Log, with the same behaviour
// as the in-process consensus.Node, and Membership for the frontend.
//
//   - Propose and ReadIndex go on one shared propose link, calls of the internal/link layer on the member's
//     Consensus port: each call is a frame written by the caller's goroutine (calls in flight together share a
//     write), with at most Config.MaxInflight proposals unacknowledged; a full window blocks Propose
//     (back-pressure). ProposeThen (commitlog.AsyncProposer) is Propose answered to a function from the
//     link's receiving goroutine, so a proposer keeps no goroutine per proposal in flight. The proposer's trace
//     context travels in each call's header. A proposal that certainly
//     did not reach consensus fails with an error marked link.ErrNotSent.
//   - Committed follows a committed link (a framed connection of its own).
//   - Committed resumes by itself after a broken connection, from the next index it has not delivered, so
//     its caller still sees every entry exactly once and in order.
//   - Errors are the server's gRPC status errors (etcd's rpctypes), unchanged.
package consensusclient
