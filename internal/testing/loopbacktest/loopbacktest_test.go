package loopbacktest

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestAddrIsBindable(t *testing.T) {
	addr := Addr(t)
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want 127.0.0.1:port", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("bind %s: %v", addr, err)
	}
	lis.Close()
	if p := Port(t); p <= 0 || p > 65535 {
		t.Fatalf("Port() = %d", p)
	}
}

// TestPortsAreNeverHandedOutTwice: released ports are drawn at random, so without the record of what was
// handed out, a few thousand draws would repeat one.
func TestPortsAreNeverHandedOutTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 3000 {
		p := Port(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// TestDelayedProxy: bytes sent through the proxy reach the target no sooner than the delay, in order; the
// target's answer comes straight back.
func TestDelayedProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	arrived := make(chan time.Time, 2)
	go func() {
		c, err := echo.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 2)
		for range 2 {
			if _, err := io.ReadFull(c, buf[:1]); err != nil {
				return
			}
			arrived <- time.Now()
			_, _ = c.Write(buf[:1])
		}
	}()
	const delay = 200 * time.Millisecond
	c, err := net.Dial("tcp", DelayedProxy(t, echo.Addr().String(), delay))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, b := range []byte("ab") {
		sent := time.Now()
		if _, err := c.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
		if at := <-arrived; at.Sub(sent) < delay {
			t.Fatalf("%q arrived %v after it was sent, want at least %v", b, at.Sub(sent), delay)
		}
		got := make([]byte, 1)
		if _, err := io.ReadFull(c, got); err != nil || got[0] != b {
			t.Fatalf("echo = %q, %v; want %q", got, err, b)
		}
	}
}

// TestProxyCounts: without a delay the proxy forwards both ways at once, and counts the connections.
func TestProxyCounts(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	p := NewProxy(t, echo.Addr().String(), 0)
	for i := range 2 {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 1)
		if _, err := c.Write([]byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil || got[0] != byte('a'+i) {
			t.Fatalf("echo = %q, %v", got, err)
		}
		_ = c.Close()
	}
	if got := p.Accepted(); got != 2 {
		t.Fatalf("accepted %d connections, want 2", got)
	}
}
