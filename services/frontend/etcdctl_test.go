package frontend_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
)

// TestEtcdctl drives a 3-member cluster with the real etcdctl v3.7.3.
func TestEtcdctl(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	c := clustertest.Start(t, clustertest.Options{})
	endpoints := strings.Join(c.Endpoints(), ",")
	run := func(t *testing.T, stdin string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if !strings.HasPrefix(args[len(args)-1], "--endpoints=") {
			args = append(args, "--endpoints="+endpoints)
		}
		cmd := exec.CommandContext(ctx, etcdctl, args...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("etcdctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	snapshot := filepath.Join(t.TempDir(), "snap.db")
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  []string
	}{
		{"put", "", []string{"put", "foo", "bar"}, []string{"OK"}},
		{"put prev kv", "", []string{"put", "foo", "baz", "--prev-kv"}, []string{"OK", "foo", "bar"}},
		{"get", "", []string{"get", "foo"}, []string{"foo\nbaz"}},
		{"get prefix keys only", "", []string{"get", "f", "--prefix", "--keys-only"}, []string{"foo"}},
		{"get json", "", []string{"get", "foo", "-w", "json"}, []string{`"cluster_id":`, `"count":1`}},
		{"txn", "value(\"foo\") = \"baz\"\n\nput foo txn\n\nput foo else\n\n", []string{"txn"}, []string{"SUCCESS", "OK"}},
		{"get after txn", "", []string{"get", "foo", "--print-value-only"}, []string{"txn"}},
		{"del", "", []string{"del", "foo"}, []string{"1"}},
		{"member list", "", []string{"member", "list", "-w", "table"}, []string{"m1", "m2", "m3", "started"}},
		{"endpoint status", "", []string{"endpoint", "status", "--cluster", "-w", "table"}, []string{"3.7.3", c.Endpoints()[0], c.Endpoints()[2]}},
		{"endpoint health", "", []string{"endpoint", "health"}, []string{"is healthy"}},
		{"endpoint hashkv", "", []string{"endpoint", "hashkv", "--cluster"}, []string{c.Endpoints()[1]}},
		{"alarm list", "", []string{"alarm", "list"}, nil},
		{"defrag", "", []string{"defrag", "--endpoints=" + c.Endpoints()[0]}, []string{"Finished defragmenting etcd member"}},
		{"snapshot save", "", []string{"snapshot", "save", snapshot, "--endpoints=" + c.Endpoints()[0]}, []string{"Snapshot saved at " + snapshot}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := run(t, tc.stdin, tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Fatalf("etcdctl %s printed %q, want %q in it", strings.Join(tc.args, " "), out, w)
				}
			}
		})
	}
	if info, err := os.Stat(snapshot); err != nil || info.Size()%512 != 32 {
		t.Fatalf("saved snapshot: %v %v", info, err)
	}
}
