// Package consensusclient is the gRPC client of a remote consensus member (the Consensus service of
// pkg/cairnpb/consensuspb). A Client implements commitlog.Log, with the same behaviour as the in-process
// consensus.Node, and Membership for the frontend.
//
//   - Propose sends proposals on one shared bidirectional stream, batched (whatever is queued while the
//     previous batch is written goes in the next), with at most Config.MaxInflight unacknowledged; a full
//     window blocks Propose (back-pressure). The proposer's trace context travels with each proposal.
//   - Committed resumes by itself after a broken connection, from the next index it has not delivered, so
//     its caller still sees every entry exactly once and in order.
//   - Errors are the server's gRPC status errors (etcd's rpctypes), unchanged.
package consensusclient
