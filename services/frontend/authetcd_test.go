package frontend_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/services/frontend"
)

// authScript is an etcdctl session over users, roles, permissions, auth enable/disable and permission denied
// on every kind of call; each step's output and exit status make one transcript line.
var authScript = []struct {
	stdin string
	args  []string
}{
	{"", []string{"auth", "status"}},
	{"", []string{"auth", "enable"}},
	{"", []string{"user", "add", "root:rootpw", "--interactive=false"}},
	{"", []string{"user", "add", "root:again", "--interactive=false"}},
	{"", []string{"auth", "enable"}},
	{"", []string{"user", "grant-role", "root", "root", "--user=root:rootpw"}},
	{"", []string{"user", "grant-role", "nobody", "root", "--user=root:rootpw"}},
	{"", []string{"role", "add", "r1", "--user=root:rootpw"}},
	{"", []string{"role", "add", "r1", "--user=root:rootpw"}},
	{"", []string{"role", "grant-permission", "r1", "read", "foo", "--user=root:rootpw"}},
	{"", []string{"role", "grant-permission", "r1", "--prefix=true", "readwrite", "app/", "--user=root:rootpw"}},
	{"", []string{"role", "grant-permission", "r1", "--from-key", "read", "z", "--user=root:rootpw"}},
	{"", []string{"role", "grant-permission", "nope", "read", "foo", "--user=root:rootpw"}},
	{"", []string{"role", "get", "r1", "--user=root:rootpw"}},
	{"", []string{"role", "get", "root", "--user=root:rootpw"}},
	{"", []string{"role", "list", "--user=root:rootpw"}},
	{"", []string{"user", "add", "alice:alicepw", "--interactive=false", "--user=root:rootpw"}},
	{"", []string{"user", "add", "nopass", "--no-password", "--user=root:rootpw"}},
	{"", []string{"user", "grant-role", "alice", "r1", "--user=root:rootpw"}},
	{"", []string{"user", "grant-role", "alice", "nope", "--user=root:rootpw"}},
	{"", []string{"user", "get", "alice", "--user=root:rootpw"}},
	{"", []string{"user", "list", "--user=root:rootpw"}},
	{"", []string{"put", "foo", "before", "--user=root:rootpw"}},
	{"", []string{"auth", "enable"}},
	{"", []string{"auth", "disable"}},
	{"", []string{"auth", "disable", "--user=alice:alicepw"}},
	{"", []string{"auth", "enable", "--user=root:rootpw"}},
	{"", []string{"get", "foo"}},
	{"", []string{"watch", "foo"}},
	{"", []string{"get", "foo", "--user=alice:wrong"}},
	{"", []string{"get", "foo", "--user=nobody:x"}},
	{"", []string{"get", "foo", "--user=nopass:x"}},
	{"", []string{"get", "foo", "--user=alice:alicepw"}},
	{"", []string{"put", "foo", "x", "--user=alice:alicepw"}},
	{"", []string{"put", "app/a", "1", "--user=alice:alicepw"}},
	{"", []string{"get", "app/", "--prefix", "--user=alice:alicepw"}},
	{"", []string{"get", "", "--from-key", "--user=alice:alicepw"}},
	{"", []string{"get", "zz", "--user=alice:alicepw"}},
	{"", []string{"del", "foo", "--user=alice:alicepw"}},
	{"", []string{"del", "app/a", "--user=alice:alicepw"}},
	{"value(\"foo\") = \"before\"\n\nput other v\n\n\n", []string{"txn", "--interactive=false", "--user=alice:alicepw"}},
	{"value(\"foo\") = \"before\"\n\nput app/b v\n\n\n", []string{"txn", "--interactive=false", "--user=alice:alicepw"}},
	{"", []string{"compaction", "1", "--user=alice:alicepw"}},
	{"", []string{"compaction", "1", "--user=root:rootpw"}},
	{"", []string{"member", "add", "m9", "--peer-urls=http://127.0.0.1:1", "--user=alice:alicepw"}},
	{"", []string{"alarm", "disarm", "--user=alice:alicepw"}},
	{"", []string{"alarm", "list", "--user=alice:alicepw"}},
	{"", []string{"lease", "list", "--user=alice:alicepw"}},
	{"", []string{"watch", "other", "--user=alice:alicepw"}},
	{"", []string{"user", "list", "--user=alice:alicepw"}},
	{"", []string{"user", "get", "alice", "--user=alice:alicepw"}},
	{"", []string{"role", "get", "r1", "--user=alice:alicepw"}},
	{"", []string{"user", "revoke-role", "root", "root", "--user=root:rootpw"}},
	{"", []string{"user", "delete", "root", "--user=root:rootpw"}},
	{"", []string{"role", "delete", "root", "--user=root:rootpw"}},
	{"", []string{"role", "revoke-permission", "r1", "foo", "--user=root:rootpw"}},
	{"", []string{"role", "revoke-permission", "r1", "foo", "--user=root:rootpw"}},
	{"", []string{"get", "foo", "--user=alice:alicepw"}},
	{"newpw\n", []string{"user", "passwd", "alice", "--interactive=false", "--user=root:rootpw"}},
	{"", []string{"get", "foo", "--user=alice:alicepw"}},
	{"", []string{"get", "foo", "--user=alice:newpw"}},
	{"", []string{"user", "delete", "bob", "--user=root:rootpw"}},
	{"", []string{"role", "delete", "nope", "--user=root:rootpw"}},
	{"", []string{"user", "revoke-role", "alice", "root", "--user=root:rootpw"}},
	{"", []string{"role", "delete", "r1", "--user=root:rootpw"}},
	{"", []string{"user", "get", "alice", "--user=root:rootpw"}},
	{"", []string{"auth", "disable", "--user=root:rootpw"}},
	{"", []string{"get", "foo"}},
}

// transcriptNoise are the parts of an answer that differ between any two runs (lease and member IDs).
var transcriptNoise = regexp.MustCompile(`[0-9a-f]{16}`)

// authTranscript runs authScript with etcdctl against endpoint.
func authTranscript(t *testing.T, etcdctl, endpoint string) []string {
	t.Helper()
	var lines []string
	for _, step := range authScript {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		cmd := exec.CommandContext(ctx, etcdctl, append(step.args, "--endpoints="+endpoint, "--dial-timeout=2s")...)
		cmd.Stdin = strings.NewReader(step.stdin)
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		status := "ok"
		var exit *exec.ExitError
		switch {
		case timedOut:
			status = "still running" // a watch that was not refused
		case errors.As(err, &exit):
			status = fmt.Sprintf("exit %d", exit.ExitCode())
		case err != nil:
			t.Fatalf("etcdctl %v: %v", step.args, err)
		}
		var kept []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if !strings.HasPrefix(line, `{"level":`) { // client/v3's retry logs: timestamps and addresses
				kept = append(kept, line)
			}
		}
		text := transcriptNoise.ReplaceAllString(strings.Join(kept, "\n"), "<id>")
		lines = append(lines, fmt.Sprintf("etcdctl %s => %s: %q", strings.Join(step.args, " "), status, text))
	}
	return lines
}

// TestAuthEtcdctlMatchesEtcd runs the same etcdctl session against real etcd v3.7.3 and against Cairn and
// compares every answer (the text etcdctl prints and its exit status).
func TestAuthEtcdctlMatchesEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real etcd and a Cairn cluster")
	}
	etcdctl := etcdreftest.Etcdctl(t)
	ref := etcdreftest.StartCluster(t, 1)
	want := authTranscript(t, etcdctl, ref.Endpoints()[0])

	c := clustertest.Start(t, clustertest.Options{Members: 1, Leasekeepers: 1, Watchhubs: 1,
		ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost = 4 }})
	c.ActiveLeasekeeper(10 * time.Second)
	got := authTranscript(t, etcdctl, c.Endpoints()[0])
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d:\n etcd:  %s\n cairn: %s", i, want[i], got[i])
		} else if testing.Verbose() {
			t.Logf("step %d: %s", i, want[i])
		}
	}
}
