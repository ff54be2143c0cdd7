// Package relayauth decides who may call a watchhub's or a leasekeeper's etcd API (Watch, Lease): the frontends
// relay clients' streams and calls to them after checking them against the auth store, so while
// authentication is enabled a hub or keeper serves only its frontends, never a client that reached its port
// directly (no copy of the permission checks runs there).
//
// A frontend proves it is one: on a stack with internal mutual TLS (--internal-*), by its certificate, which
// the hub's listener has already verified (every caller of that port is internal); on a plain stack, by the
// stack's relay secret (--relay-secret, or --relay-secret-file so that it shows on no command line: one random
// value per `cairn dev` process, kept in DATA-DIR/relay-secret by `cairn up` and in the keys volume by the
// compose stack, LoadOrCreateSecretFile), sent as gRPC metadata on every relayed call (DialOption). A Guard on the hub's or keeper's gRPC server refuses any
// other caller with ErrDirectClient while the auth store says authentication is enabled (SetAuthEnabled, from
// the storage status the service polls; until the first poll calls wait for it; with SetRefresh, a caller
// without the secret is never let through on a "disabled" older than FreshFor, so the poll may be rare). With authentication
// disabled every caller is served, so benchmarks may still stream to hubs directly.
//
// A frontend also says what it checked a relayed lease grant or revoke against (Fence, WithFence, FenceFrom:
// binary gRPC metadata), for the keeper to put in the header of the entry it proposes, where storage checks it
// as it checks a KV write's. Only a frontend's is believed: while authentication is enabled the Guard admits no
// one else, and a frontend replaces any fence a client sent.
//
// It needs only gRPC; product code and services import it, never the other way round.
package relayauth
