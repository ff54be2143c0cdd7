package memnet

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestNetwork: a listener is reached at its address and only there; a closed one frees its address for
// ListenAt; a route serves its address; and inside a bubble a dial nobody accepts waits on the fake clock.
func TestNetwork(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, n *Network)
	}{
		{"bytes pass both ways", func(t *testing.T, n *Network) {
			lis := n.Listen()
			defer lis.Close()
			go func() {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
			c, err := n.Dial(context.Background(), lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 4)
			if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
				t.Fatalf("echo %q, %v; want ping", got, err)
			}
		}},
		{"an address nobody serves is refused", func(t *testing.T, n *Network) {
			if _, err := n.Dial(context.Background(), "127.0.0.1:1"); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial of an unserved address: %v, want ECONNREFUSED", err)
			}
		}},
		{"listeners get distinct loopback addresses", func(t *testing.T, n *Network) {
			a, b := n.Listen(), n.Listen()
			defer a.Close()
			defer b.Close()
			ta, ok := a.Addr().(*net.TCPAddr)
			if !ok || !ta.IP.IsLoopback() || a.Addr().String() == b.Addr().String() {
				t.Fatalf("addresses %v and %v, want two distinct 127.0.0.1 ones", a.Addr(), b.Addr())
			}
		}},
		{"a closed listener frees its address", func(t *testing.T, n *Network) {
			lis := n.Listen()
			addr := lis.Addr().String()
			if _, err := n.ListenAt(addr); err == nil {
				t.Fatal("ListenAt on an address in use succeeded")
			}
			_ = lis.Close()
			if _, err := n.Dial(context.Background(), addr); err == nil {
				t.Fatal("dial of a closed listener's address succeeded")
			}
			again, err := n.ListenAt(addr)
			if err != nil {
				t.Fatalf("ListenAt after close: %v", err)
			}
			_ = lis.Close() // a second close must not free the address from the new listener
			if _, err := n.ListenAt(addr); err == nil {
				t.Fatal("the old listener's second Close freed the new listener's address")
			}
			_ = again.Close()
		}},
		{"a route serves its address", func(t *testing.T, n *Network) {
			server, client := net.Pipe()
			defer server.Close()
			n.Route("127.0.0.1:4222", func(context.Context) (net.Conn, error) { return client, nil })
			c, err := n.Dial(context.Background(), "127.0.0.1:4222")
			if err != nil || c != client {
				t.Fatalf("dial of the route: %v, %v; want the route's connection", c, err)
			}
			_ = c.Close()
		}},
		{"a dial nobody accepts ends with its context, on the fake clock", func(t *testing.T, n *Network) {
			lis := n.Listen()
			defer lis.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			if _, err := n.Dial(ctx, lis.Addr().String()); err == nil {
				t.Fatal("dial without an Accept succeeded")
			}
			if waited := time.Since(start); waited != time.Minute {
				t.Fatalf("dial gave up after %v, want exactly its context's minute", waited)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { tt.run(t, New()) })
		})
	}
}
