// Package eventbustest runs the event bus's NATS in-process for tests that run in a synctest bubble (package
// testing/synctest), where time is the subject: heartbeats, turns, announcements of interest and their expiry.
//
// A bubble's fake clock moves only when every goroutine of the bubble waits durably; a goroutine reading a
// socket does not, so a NATS server on loopback would stop the clock. This server does not listen: its clients
// connect through in-memory pipes (nats.InProcessServer), and server and clients started inside the bubble belong
// to it. Start it inside the bubble (within synctest.Test), so it is stopped, with its clients, before the bubble
// ends.
//
// One more rule inside a bubble: flush with Flush below (Conn.FlushWithContext), not Conn.Flush or FlushTimeout,
// which take a timer from a pool nats.go shares across the process (a timer made in one bubble must not be used
// in another: fatal error).
package eventbustest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Bus is a NATS server without a listener.
type Bus struct {
	srv *server.Server
}

// Start starts a Bus; it shuts down when the test ends.
func Start(t testing.TB) *Bus {
	t.Helper()
	srv, err := server.NewServer(&server.Options{DontListen: true, NoSigs: true, NoLog: true,
		MaxPayload: 8 << 20}) // as eventbus.StartEmbedded: a record can carry a whole txn with prev kvs
	if err != nil {
		t.Fatalf("in-process nats server: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("in-process nats server not ready")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return &Bus{srv: srv}
}

// Connect connects a client named name to b through an in-memory pipe; it closes when the test ends (before b
// shuts down).
func (b *Bus) Connect(t testing.TB, name string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(b.srv), nats.Name(name))
	if err != nil {
		t.Fatalf("connect %s to the in-process nats server: %v", name, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// InProcessConn is a new client connection to b through an in-memory pipe, for a client that dials b itself
// (a memnet route, so a service's dialer reaches b).
func (b *Bus) InProcessConn(context.Context) (net.Conn, error) {
	c, err := b.srv.InProcessConn()
	if err != nil {
		return nil, fmt.Errorf("in-process nats connection: %w", err)
	}
	return c, nil
}

// Flush waits until the server has processed everything nc sent, for at most 10 seconds (on the fake clock
// inside a bubble). Unlike nc.Flush it can be used in any bubble, and outside one.
func Flush(t testing.TB, nc *nats.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}
