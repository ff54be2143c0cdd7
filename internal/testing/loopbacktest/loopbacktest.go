// Package loopbacktest hands tests free 127.0.0.1 addresses. A port is released before the caller binds it, so it
// is drawn as supervisor.FreePorts draws one: from below the kernel's ephemeral range, where no outgoing
// connection can take it in the meantime. No port is handed out twice in one test binary: a port released
// for one cluster member could otherwise be drawn again for the next before the first binds it.
package loopbacktest

import (
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// Addr returns a free 127.0.0.1:port.
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t)))
}

// handedOut are the ports Port has returned in this test binary. It is the package's one piece of state,
// and exists because the ports are released before they are bound.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Port returns a free port on 127.0.0.1 that no earlier call returned.
func Port(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		ports, err := supervisor.FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		if !handedOut.ports[ports[0]] {
			handedOut.ports[ports[0]] = true
			return ports[0]
		}
	}
}
