// Package loopback hands tests free 127.0.0.1 addresses. A port is released before the caller binds it: racy in
// principle, reliable on loopback in practice (supervisor.FreePorts serves the same need outside tests).
package loopback

import (
	"net"
	"testing"
)

// Addr returns a free 127.0.0.1:port.
func Addr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// Port returns a free port on 127.0.0.1.
func Port(t testing.TB) int {
	t.Helper()
	addr, err := net.ResolveTCPAddr("tcp", Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	return addr.Port
}
