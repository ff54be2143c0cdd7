package supervisor

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// ReadyCheck reports whether a child is ready to serve; nil means ready. It is called repeatedly, each call
// bounded by ctx, until it returns nil.
type ReadyCheck func(ctx context.Context) error

// HTTPReady is ready when a GET of url answers with a 2xx status (e.g. a service's /health).
func HTTPReady(url string) ReadyCheck {
	client := &http.Client{Timeout: 2 * time.Second}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("ready check %s: %w", url, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("ready check: %w", err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("ready check %s: status %s", url, resp.Status)
		}
		return nil
	}
}

// TCPReady is ready when a TCP connection to addr (host:port) can be opened.
func TCPReady(addr string) ReadyCheck {
	return func(ctx context.Context) error {
		var dialer net.Dialer
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("ready check: %w", err)
		}
		return conn.Close()
	}
}
