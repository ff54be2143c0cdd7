package loopbacktest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards each connection made to Addr on to a target, and counts them. What a client sends is
// delivered delay after it was sent, in order (at once with no delay); what the target sends comes back at
// once. Its listener and connections close when the test ends.
type Proxy struct {
	// Addr is where to connect.
	Addr     string
	accepted atomic.Int64
}

// Accepted is how many connections the proxy has accepted.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// NewProxy starts a proxy to target; see Proxy.
func NewProxy(t testing.TB, target string, delay time.Duration) *Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: lis.Addr().String()}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			client, err := lis.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			go func() { _, _ = io.Copy(client, server) }()
			if delay > 0 {
				go forwardLate(client, server, delay)
			} else {
				go func() { _, _ = io.Copy(server, client) }()
			}
		}
	}()
	return p
}

// DelayedProxy is NewProxy's address: it stands for a link on which one party's messages arrive late, such as
// a subscription that reaches a NATS server after another client's publish.
func DelayedProxy(t testing.TB, target string, delay time.Duration) string {
	t.Helper()
	return NewProxy(t, target, delay).Addr
}

// forwardLate copies from to to, each read delay after it was read, until either side fails.
func forwardLate(from, to net.Conn, delay time.Duration) {
	type chunk struct {
		data []byte
		due  time.Time
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := from.Read(buf)
			if n > 0 {
				chunks <- chunk{data: buf[:n], due: time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	defer to.Close()
	for c := range chunks {
		time.Sleep(time.Until(c.due))
		if _, err := to.Write(c.data); err != nil {
			return
		}
	}
}
