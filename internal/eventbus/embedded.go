package eventbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// EmbeddedConfig configures an in-process NATS server.
type EmbeddedConfig struct {
	// Host and Port to listen on; Port -1 picks a free port (the default 0 means NATS's 4222).
	Host string
	Port int
	// HTTPPort serves NATS monitoring (/varz, /healthz) when not 0; -1 picks a free port.
	HTTPPort int
	// ReadyTimeout bounds the wait for the server to accept connections (default 10s).
	ReadyTimeout time.Duration
	// TLS, when set, locks the bus down: clients must connect with TLS and a certificate of the link's CA
	// that names a role (RoleURI), and each role may publish and subscribe only what it needs. Nil: plain.
	TLS *tlsconfig.Link
	// RoleKeys, when set, lock the bus down with nkeys instead of certificates: a client proves its role with
	// the role's nkey seed (NkeySeedFile), with or without TLS. With neither TLS nor RoleKeys the bus is open
	// to any client.
	RoleKeys RoleKeys
	// Logger gets the server's notices, warnings and errors (refused clients, permission violations); nil:
	// none.
	Logger *slog.Logger
	// Registry gets the refusals' counters (cairn_tls_handshake_failures_total{link="nats"},
	// cairn_nats_authorization_violations_total); nil: not exported.
	Registry prometheus.Registerer
}

// Embedded is a NATS server running inside this process.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts a NATS server and waits until it accepts connections.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	opts := &server.Options{
		Host:                  cfg.Host,
		Port:                  cfg.Port,
		HTTPHost:              cfg.Host,
		HTTPPort:              cfg.HTTPPort,
		NoSigs:                true,
		NoLog:                 true,
		MaxPayload:            8 << 20, // a record can carry a whole txn with prev kvs
		MaxPending:            256 << 20,
		WriteDeadline:         10 * time.Second,
		DisableShortFirstPing: true,
	}
	if cfg.TLS.Enabled() {
		opts.TLSConfig = cfg.TLS.ServerConfig()
		opts.TLS, opts.TLSVerify = true, true
		opts.TLSTimeout = 5
	}
	switch {
	case len(cfg.RoleKeys) > 0:
		opts.Nkeys = nkeyUsers(cfg.RoleKeys)
	case cfg.TLS.Enabled():
		opts.TLSMap, opts.Users = true, certificateUsers()
	}
	logger, err := newRefusalLogger(cfg.Logger, cfg.Registry)
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server on %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	opts.NoLog = false
	// Debug on: nats-server logs a plain-text client on a TLS port (a "probe") at debug level only.
	srv.SetLogger(logger, true, false)
	srv.Start()
	if !srv.ReadyForConnections(cfg.ReadyTimeout) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats server on %s:%d not ready after %s", cfg.Host, cfg.Port, cfg.ReadyTimeout)
	}
	return &Embedded{srv: srv}, nil
}

// ClientURL is the nats:// URL clients connect to.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Health is nil while the server is running; for obs.AdminMux.
func (e *Embedded) Health(context.Context) error {
	if !e.srv.Running() {
		return errors.New("nats server is not running")
	}
	return nil
}

// Shutdown stops the server and waits until it is down.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
