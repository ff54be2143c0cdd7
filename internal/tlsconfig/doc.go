// Package tlsconfig is Cairn's one TLS configuration, for the three kinds of link a process has: etcd's client
// port (--cert-file, --key-file, --trusted-ca-file, --client-cert-auth), raft peers (etcd's --peer-* flags, with
// --peer-cert-allowed-cn and --peer-cert-allowed-hostname) and the internal links between services
// (--internal-cert-file, --internal-key-file, --internal-trusted-ca-file, always mutual), all under one policy
// (--tls-min-version, --tls-max-version, --cipher-suites). The configurations are etcd's own
// (go.etcd.io/etcd/client/pkg/v3/transport.TLSInfo): a certificate is read again at every handshake, so a
// rotated one takes effect without a restart; the trusted CAs are read at start, as in etcd.
//
// A Link is one kind of link in a running process: it wraps the listeners the process serves and the
// connections it dials (framed links, gRPC), and logs and counts every handshake it refuses
// (cairn_tls_handshake_failures_total{link,side}). A nil *Link is a plain link, so a service takes one
// unconditionally. Pki issues the CA and per-process certificates `cairn up --tls` and `cairn dev --tls` keep
// in their data directory.
//
// It needs the certificate files; it holds no global state.
package tlsconfig
