package loopbacktest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// DelayedProxy forwards each connection made to the address it returns on to target. What a client sends is
// delivered delay after it was sent, in order; what target sends comes back at once. It stands for a link on
// which one party's messages arrive late, such as a subscription that reaches a NATS server after another
// client's publish. Its listener and connections close when the test ends.
func DelayedProxy(t testing.TB, target string, delay time.Duration) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			go func() { _, _ = io.Copy(client, server) }()
			go forwardLate(client, server, delay)
		}
	}()
	return lis.Addr().String()
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
