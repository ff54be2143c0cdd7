package frontend

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/soheilhy/cmux"
	"google.golang.org/grpc/credentials"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// serveTLS serves a TLS client port. The handshake comes first (refusals logged and counted in
// cairn_tls_handshake_failures_total{link="client"}); it agrees on the protocol (ALPN), preferring HTTP/1.1:
// gRPC clients offer only h2 and get it, and their connections go to the gRPC server's own transport; every
// other client (the gateway, /health, /metrics; curl, browsers) offers HTTP/1.1 too and gets it, from mux.
// etcd instead serves gRPC through its HTTP/2 server's handler (grpc.Server.ServeHTTP), which writes each
// HTTP/2 frame as its own TLS record and syscall: on a put-1000 load that path took two thirds of the
// throughput, and is why an https client port served gRPC much slower than an http one.
func (f *Frontend) serveTLS(lis net.Listener, tlsConfig *tls.Config, mux http.Handler) error {
	tlsConfig = tlsConfig.Clone()
	tlsConfig.NextProtos = []string{"http/1.1", "h2"}
	secure, err := tlsconfig.NewServerLink(tlsconfig.KindClient, tlsConfig,
		tlsconfig.Deps{Logger: f.logger, Registry: f.metrics.registry})
	if err != nil {
		return err
	}
	m := cmux.New(secure.Listener(lis, "frontend"))
	grpcL := m.MatchWithWriters(negotiated("h2"))
	httpL := m.Match(cmux.Any())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Minute}
	f.muxes, f.httpServers = append(f.muxes, m), append(f.httpServers, srv)
	f.serve("grpc", lis, func() error { return f.grpcServer.Serve(grpcL) })
	f.serve("https", lis, func() error { return srv.Serve(httpL) })
	f.serve("cmux", lis, m.Serve)
	return nil
}

// negotiated matches a TLS connection whose handshake agreed on protocol. w is the connection (the
// link's, which handshakes on its first read); reading r, what cmux replays to whoever matches, completes the
// handshake first.
func negotiated(protocol string) cmux.MatchWriter {
	return func(w io.Writer, r io.Reader) bool {
		if _, err := r.Read(make([]byte, 1)); err != nil {
			return false
		}
		secure, ok := w.(interface{ ConnectionState() tls.ConnectionState })
		return ok && secure.ConnectionState().NegotiatedProtocol == protocol
	}
}

// clientPortCredentials give the gRPC server the TLS state of a connection a TLS client port already
// handshook (serveTLS), so a client certificate's CN can name the caller; a plain port's connections pass
// through with no security info.
type clientPortCredentials struct{}

func (clientPortCredentials) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	inner := conn
	if mc, ok := conn.(*cmux.MuxConn); ok {
		inner = mc.Conn
	}
	secure, ok := inner.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return conn, nil, nil
	}
	return conn, credentials.TLSInfo{State: secure.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (clientPortCredentials) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("frontend: client port credentials serve only")
}

func (clientPortCredentials) Info() credentials.ProtocolInfo { return credentials.ProtocolInfo{} }

func (c clientPortCredentials) Clone() credentials.TransportCredentials { return c }

func (clientPortCredentials) OverrideServerName(string) error { return nil }
