// Package memnet is an in-memory network for tests that run services inside a synctest bubble (package
// testing/synctest), where time is the subject: lease TTLs, elections, takeovers.
//
// A bubble's fake clock moves only when every goroutine of the bubble waits durably; a goroutine reading a
// socket does not, so services on loopback would stop the clock. A Network hands out listeners whose
// connections are in-memory pipes (google.golang.org/grpc/test/bufconn: buffered, blocking on sync.Cond), each
// under a made-up 127.0.0.1 address that passes the services' URL checks, and a Dial that reaches them by that
// address. Pass a listener in a service's Deps and Dial as its dialer. Routes serve an address from something
// else that hands out connections (the event bus's in-process NATS).
//
// Make the Network, its listeners and every connection inside the bubble (within synctest.Test): a pipe's
// condition variables and timers then belong to the bubble.
package memnet

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"

	"google.golang.org/grpc/test/bufconn"
)

// firstPort is the port of the first listener; nothing listens on the ports below it, so a test can name an
// unreachable address (127.0.0.1:1).
const firstPort = 10001

// pipeBuffer is how much one direction of a connection holds before its writer waits for the reader.
const pipeBuffer = 1 << 20

// Network is a set of in-memory listeners reached by address. The zero value is not usable; use New.
type Network struct {
	mu       sync.Mutex
	nextPort int
	routes   map[string]func(context.Context) (net.Conn, error)
}

// New returns an empty Network.
func New() *Network {
	return &Network{nextPort: firstPort, routes: map[string]func(context.Context) (net.Conn, error){}}
}

// Listen returns a listener on the next free 127.0.0.1 port of n.
func (n *Network) Listen() net.Listener {
	n.mu.Lock()
	defer n.mu.Unlock()
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: n.nextPort}
	n.nextPort++
	return n.listenLocked(addr)
}

// ListenAt returns a listener on addr (host:port), e.g. a restarted server's old address; it fails while
// something else serves addr.
func (n *Network) ListenAt(addr string) (net.Listener, error) {
	tcpAddr, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("memnet listen %s: %w", addr, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.routes[tcpAddr.String()]; ok {
		return nil, fmt.Errorf("memnet listen %s: address already in use", addr)
	}
	return n.listenLocked(tcpAddr), nil
}

// listenLocked serves addr from a new listener until it closes. Closing it refuses new connections and frees
// addr; connections already made stay open until either end closes them.
func (n *Network) listenLocked(addr *net.TCPAddr) net.Listener {
	l := &listener{Listener: bufconn.Listen(pipeBuffer), addr: addr}
	l.unroute = func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.routes, addr.String())
	}
	n.routes[addr.String()] = l.DialContext
	return l
}

// Route makes connections to addr (host:port) come from connect, e.g. an in-process NATS server's
// InProcessConn.
func (n *Network) Route(addr string, connect func(context.Context) (net.Conn, error)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.routes[addr] = connect
}

// Dial connects to the listener or route at addr (host:port); an address nothing serves is refused
// (syscall.ECONNREFUSED, as TCP's refusal). A listener
// connection waits for the listener to accept, at most until ctx ends. Its signature is
// grpc.WithContextDialer's and the services' Deps.Dialer.
func (n *Network) Dial(ctx context.Context, addr string) (net.Conn, error) {
	n.mu.Lock()
	connect, ok := n.routes[addr]
	n.mu.Unlock()
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: "memnet", Err: fmt.Errorf("%s: %w", addr, syscall.ECONNREFUSED)}
	}
	c, err := connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return c, nil
}

// listener is a bufconn listener under a 127.0.0.1 address.
type listener struct {
	*bufconn.Listener
	addr      *net.TCPAddr
	unroute   func()
	closeOnce sync.Once
}

func (l *listener) Addr() net.Addr { return l.addr }

// Close refuses new connections and frees the address (once: a second Close does not free it from a
// listener that took it since).
func (l *listener) Close() error {
	l.closeOnce.Do(l.unroute)
	return l.Listener.Close()
}
