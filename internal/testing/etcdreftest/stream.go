package etcdreftest

import (
	"bufio"
	"context"
	"os/exec"
	"testing"
	"time"
)

// EtcdctlLines starts etcdctl with args for a command that keeps printing (etcdctl watch) and returns its
// output lines (stdout and stderr) as they come, closed when it exits, and a function that waits for it to
// exit. It is killed after timeout, and when t ends.
func EtcdctlLines(t testing.TB, etcdctl string, timeout time.Duration, args ...string) (<-chan string, func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := exec.CommandContext(ctx, etcdctl, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		scanner := bufio.NewScanner(out)
		for scanner.Scan() {
			lines <- scanner.Text()
		}
	}()
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	return lines, func() error { defer cancel(); return cmd.Wait() }
}

// NextLines reads n lines from lines, failing t if they do not come within timeout.
func NextLines(t testing.TB, lines <-chan string, n int, timeout time.Duration) []string {
	t.Helper()
	var got []string
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("etcdctl ended after %q, want %d lines", got, n)
			}
			got = append(got, l)
		case <-deadline:
			t.Fatalf("etcdctl printed %q within %s, want %d lines", got, timeout, n)
		}
	}
	return got
}
