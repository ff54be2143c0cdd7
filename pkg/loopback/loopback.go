// Package loopback hands tests free 127.0.0.1 addresses. A port is released before the caller binds it, so it
// is drawn as supervisor.FreePorts draws one: from below the kernel's ephemeral range, where no outgoing
// connection can take it in the meantime.
package loopback

import (
	"net"
	"strconv"
	"testing"

	"github.com/cairn-kv/cairn/pkg/supervisor"
)

// Addr returns a free 127.0.0.1:port.
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t)))
}

// Port returns a free port on 127.0.0.1.
func Port(t testing.TB) int {
	t.Helper()
	ports, err := supervisor.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}
