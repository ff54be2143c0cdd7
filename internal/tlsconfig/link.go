package tlsconfig

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// handshakeTimeout bounds a TLS handshake on either side.
const handshakeTimeout = 10 * time.Second

// Kinds of link, the link label of the metric.
const (
	KindPeer     = "peer"
	KindInternal = "internal"
	// KindClient is etcd's client port (the frontends'), KindNATS the bus: their servers do their own TLS
	// and count their refusals in the same metric (HandshakeFailures).
	KindClient = "client"
	KindNATS   = "nats"
)

// Deps are where a Link reports.
type Deps struct {
	// Logger gets one line per refused handshake; nil discards.
	Logger *slog.Logger
	// Registry gets cairn_tls_handshake_failures_total (shared by every Link of a process); nil: not exported.
	Registry prometheus.Registerer
}

// Link is the TLS of one kind of link in a running process. A nil *Link is plain: its methods pass connections
// through unchanged and give gRPC insecure credentials.
type Link struct {
	kind     string
	server   *tls.Config
	client   *tls.Config
	logger   *slog.Logger
	failures *prometheus.CounterVec
}

// NewLink returns the Link of kind (KindPeer, KindInternal) for f under p, or nil when f names no certificate
// (plain). An internal link is always mutual: it needs the trusted CA file, and clients must present a
// certificate it signed.
func NewLink(kind string, f Files, p Policy, deps Deps) (*Link, error) {
	if f.Empty() {
		return nil, nil
	}
	if kind == KindInternal {
		if f.TrustedCAFile == "" {
			return nil, fmt.Errorf("tlsconfig: --%strusted-ca-file is needed with --%scert-file (internal links are mutual TLS)", f.FlagPrefix, f.FlagPrefix)
		}
		f.ClientCertAuth = true
	}
	server, err := f.ServerConfig(p)
	if err != nil {
		return nil, err
	}
	client, err := f.ClientConfig(p)
	if err != nil {
		return nil, err
	}
	l, err := NewServerLink(kind, server, deps)
	if err != nil {
		return nil, err
	}
	l.client = client
	return l, nil
}

// NewServerLink is the Link of a port this process serves with server, a configuration of its own (etcd's
// client port: Files.ClientPortConfig): its Listener handshakes, logs and counts refusals as every link's
// does. It dials nothing (ClientConfig is nil).
func NewServerLink(kind string, server *tls.Config, deps Deps) (*Link, error) {
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	failures, err := HandshakeFailures(deps.Registry)
	if err != nil {
		return nil, err
	}
	return &Link{kind: kind, server: server, logger: logger, failures: failures}, nil
}

// HandshakeFailures is the process's cairn_tls_handshake_failures_total{link,side}, registered on reg once
// (every caller gets the same counter); not exported when reg is nil.
func HandshakeFailures(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_tls_handshake_failures_total",
		Help: "TLS handshakes refused, by kind of link (client, peer, internal) and side (server: a connection this process accepted; client: one it dialed).",
	}, []string{"link", "side"})
	if reg == nil {
		return vec, nil
	}
	if err := reg.Register(vec); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			return already.ExistingCollector.(*prometheus.CounterVec), nil
		}
		return nil, fmt.Errorf("tlsconfig: register metrics: %w", err)
	}
	return vec, nil
}

// Enabled reports whether the link is TLS.
func (l *Link) Enabled() bool { return l != nil }

// ClientConfig is the configuration this process dials the link with (nil when plain); callers must not
// change it.
func (l *Link) ClientConfig() *tls.Config {
	if l == nil {
		return nil
	}
	return l.client
}

// refused logs and counts a handshake that failed on side ("server" or "client").
func (l *Link) refused(side, service string, remote net.Addr, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	l.failures.WithLabelValues(l.kind, side).Inc()
	addr := ""
	if remote != nil {
		addr = remote.String()
	}
	l.logger.Warn("TLS handshake refused", "link", l.kind, "side", side, "service", service, "remote", addr, "err", err)
}

// Listener returns lis serving TLS for the link (lis itself when plain). Each connection completes its
// handshake before its first byte is read or written; one that fails (no certificate, another CA's, a CN not
// allowed, plain text) is logged with service, counted and closed, so nothing is sent to it.
func (l *Link) Listener(lis net.Listener, service string) net.Listener {
	if l == nil {
		return lis
	}
	return &listener{Listener: lis, link: l, service: service}
}

type listener struct {
	net.Listener
	link    *Link
	service string
}

func (ls *listener) Accept() (net.Conn, error) {
	nc, err := ls.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &serverConn{Conn: tls.Server(nc, ls.link.server), listener: ls}, nil
}

// serverConn is an accepted connection that handshakes once, on its first read or write.
type serverConn struct {
	*tls.Conn
	listener *listener
	once     sync.Once
	err      error
}

func (c *serverConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		defer cancel()
		if c.err = c.Conn.HandshakeContext(ctx); c.err != nil {
			c.listener.link.refused("server", c.listener.service, c.Conn.RemoteAddr(), c.err)
			c.answerPlainHTTP()
			_ = c.Conn.NetConn().Close()
		}
	})
	return c.err
}

// answerPlainHTTP tells a plain-text HTTP client of a client port what it did wrong, as net/http's TLS
// server (and so etcd) does; the other links answer nothing.
func (c *serverConn) answerPlainHTTP() {
	var plain tls.RecordHeaderError
	if c.listener.link.kind != KindClient || !errors.As(c.err, &plain) || plain.Conn == nil {
		return
	}
	if method := string(plain.RecordHeader[:]); !slices.Contains([]string{"GET /", "HEAD ", "POST ", "PUT /", "OPTIO"}, method) {
		return
	}
	_, _ = io.WriteString(plain.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
}

func (c *serverConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *serverConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// Client secures nc, a connection this process dialed to addr (host:port, whose host the server's certificate
// must be valid for), with a completed handshake; nc itself when plain. A failed handshake is logged, counted
// and closes nc.
func (l *Link) Client(nc net.Conn, addr string) (net.Conn, error) {
	if l == nil {
		return nc, nil
	}
	cfg := l.client.Clone()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg.ServerName = host
	}
	conn := tls.Client(nc, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	if err := conn.HandshakeContext(ctx); err != nil {
		l.refused("client", "", nc.RemoteAddr(), err)
		_ = nc.Close()
		return nil, fmt.Errorf("tlsconfig: %s link to %s: %w", l.kind, addr, err)
	}
	return conn, nil
}

// GRPC is the transport credentials gRPC clients of the link dial with: TLS with this process's certificate
// (refusals logged and counted), or insecure when plain.
func (l *Link) GRPC() credentials.TransportCredentials {
	if l == nil {
		return insecure.NewCredentials()
	}
	return countingCreds{TransportCredentials: credentials.NewTLS(l.client), link: l}
}

// countingCreds logs and counts the client handshakes gRPC's TLS credentials refuse.
type countingCreds struct {
	credentials.TransportCredentials
	link *Link
}

func (c countingCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil && ctx.Err() == nil {
		c.link.refused("client", authority, raw.RemoteAddr(), err)
	}
	return conn, info, err
}

func (c countingCreds) Clone() credentials.TransportCredentials {
	return countingCreds{TransportCredentials: c.TransportCredentials.Clone(), link: c.link}
}

// DialOption is GRPC as a dial option; given after a plain default, it replaces it.
func (l *Link) DialOption() grpc.DialOption { return grpc.WithTransportCredentials(l.GRPC()) }

// ServerConfig is the configuration this process serves the link with (nil when plain), for a server that
// does its own TLS (NATS); callers must not change it.
func (l *Link) ServerConfig() *tls.Config {
	if l == nil {
		return nil
	}
	return l.server
}
