package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/leasetest"
)

// etcdctlRun runs etcdctl against endpoints and returns its stdout, the "Error:" line of its stderr and its exit
// code.
func etcdctlRun(t *testing.T, etcdctl, endpoints string, timeout time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, etcdctl, append(args, "--endpoints="+endpoints)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("etcdctl %v: %v", args, err)
	}
	var errLine string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(line, "Error:") {
			errLine = line
		}
	}
	return stdout.String(), errLine, code
}

// leaseScript runs the same etcdctl lease session against endpoints and returns what it printed, with lease IDs
// numbered in order of appearance, remaining TTLs masked and attached keys sorted (etcd lists them in no order).
func leaseScript(t *testing.T, etcdctl, endpoints string) []string {
	run := func(args ...string) (string, string, int) {
		return etcdctlRun(t, etcdctl, endpoints, 20*time.Second, args...)
	}
	out, _, _ := run("lease", "grant", "30")
	id := strings.Fields(out)[1]
	out2, _, _ := run("lease", "grant", "60")
	id2 := strings.Fields(out2)[1]
	steps := [][]string{
		{"put", "--lease=" + id, "k1", "v"},
		{"put", "--lease=" + id, "k0", "v"},
		{"lease", "timetolive", id, "--keys"},
		{"lease", "timetolive", id},
		{"lease", "timetolive", "1234"},
		{"lease", "list"},
		{"lease", "keep-alive", "--once", id},
		{"lease", "revoke", id},
		{"lease", "revoke", id},
		{"get", "k1"},
		{"lease", "keep-alive", "--once", "1234"},
		{"put", "--lease=1234", "x", "y"},
		{"lease", "grant", "9000000001"},
		{"lease", "grant", "1"},
	}
	normalize := leasetest.TranscriptNormalizer()
	transcript := []string{normalize(out), normalize(out2)}
	for _, args := range steps {
		stdout, errLine, code := run(args...)
		transcript = append(transcript, fmt.Sprintf("$ etcdctl %s\n%s%s\nexit %d", normalize(strings.Join(args, " ")), normalize(stdout), errLine, code))
	}
	// keep-alive (not --once) prints a line per answer until stopped.
	stdout, _, _ := etcdctlRun(t, etcdctl, endpoints, 2*time.Second, "lease", "keep-alive", id2)
	transcript = append(transcript, fmt.Sprintf("keep-alive printed: %v", strings.Contains(stdout, "lease "+id2+" keepalived with TTL(60)")))
	return transcript
}

// TestEtcdctlLeases runs one etcdctl lease session (grant, put --lease, timetolive --keys, list, keep-alive,
// revoke, and the error cases) against a real etcd v3.7.3 and against Cairn with two leasekeepers, and compares
// the transcripts line by line.
func TestEtcdctlLeases(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	etcd := etcdreftest.StartCluster(t, 1)
	c := clustertest.Start(t, clustertest.Options{Leasekeepers: 2})
	c.ActiveLeasekeeper(10 * time.Second)
	want := leaseScript(t, etcdctl, strings.Join(etcd.Endpoints(), ","))
	got := leaseScript(t, etcdctl, strings.Join(c.Endpoints(), ","))
	if last := got[len(got)-1]; last != "keep-alive printed: true" || len(got) != 17 {
		t.Fatalf("transcript of %d steps ends with %q", len(got), last)
	}
	for i := range max(len(want), len(got)) {
		if i >= len(want) || i >= len(got) || want[i] != got[i] {
			t.Errorf("step %d differs:\netcd:\n%s\ncairn:\n%s", i, at(want, i), at(got, i))
		}
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(nothing)"
}
