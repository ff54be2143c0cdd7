package loopbacktest

import (
	"net"
	"strings"
	"testing"
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
