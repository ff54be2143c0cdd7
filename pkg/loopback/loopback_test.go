package loopback

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
