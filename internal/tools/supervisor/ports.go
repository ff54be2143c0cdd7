package supervisor

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowestPort is the bottom of the range FreePorts draws from: above the well-known and common service ports.
const lowestPort = 10000

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free at the time of the call. It holds all n
// listeners open together before closing them, so the ports differ from each other. The ports are drawn at
// random from below the kernel's ephemeral range, so no outgoing connection (which takes its local port from
// that range) can take one between this call and the caller's bind; another process choosing a fixed port may
// still, which a supervised child survives by being restarted.
func FreePorts(n int) ([]int, error) {
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	highest := ephemeralLow() - 1
	ports := make([]int, 0, n)
	for attempt := 0; len(ports) < n; attempt++ {
		addr := "127.0.0.1:0"
		if highest > lowestPort && attempt < 100*n {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(lowestPort+rand.IntN(highest-lowestPort+1)))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // taken: draw another
			}
			return nil, fmt.Errorf("free ports: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral (outgoing) range, Linux's default when it cannot
// be read.
func ephemeralLow() int {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return low
}
