package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// TestMembershipOnCairnUp grows a 1-member `cairn up` as etcd grows (etcd 3.7 accepts a member added to a
// single member), loses the member to a plain `etcdctl member remove` (its processes stop instead of
// crash-looping), and replaces it as the README's runbook does: add the name again as a learner, promote.
func TestMembershipOnCairnUp(t *testing.T) {
	dir := t.TempDir()
	s := startUp(t, dir, "--members", "1", "--leasekeepers", "1", "--watchhubs", "1")
	etcdctl := etcdreftest.Etcdctl(t)
	c := s.client(t, s.endpoints[0])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := c.Put(ctx, "before", "1"); err != nil {
		t.Fatal(err)
	}
	memberProcesses := []string{"consensus-2", "storage-2", "frontend-2"}

	addLearnerAndPromote := func(args ...string) string {
		out := mustRunCairn(t, append([]string{"up", "member", "add", "--data-dir", dir, "--learner"}, args...)...)
		_, id, ok := strings.Cut(strings.TrimSpace(out), "(ID ")
		id, _, _ = strings.Cut(id, ")")
		if !ok || !strings.Contains(out, "member-2") {
			t.Fatalf("cairn up member add printed %q", out)
		}
		for _, name := range memberProcesses {
			if child := s.child(t, name); child.State != supervisor.StateRunning || !child.Ready {
				t.Fatalf("after member add: %+v", child)
			}
		}
		if n := storageEndpoints(t, s, "frontend-1"); n != 2 {
			t.Fatalf("frontend-1's next command line lists %d storages, want 2", n)
		}
		waittest.Until(t, time.Minute, 200*time.Millisecond, "the learner to be promoted", func() bool {
			res := runEtcdctl(t, etcdctl, s.endpoints[:1], "", "member", "promote", id)
			if res.ExitCode != 0 && !strings.Contains(res.Stderr, "learner member which is not in sync") {
				t.Fatalf("member promote %s: %s%s", id, res.Stdout, res.Stderr)
			}
			return res.ExitCode == 0
		})
		list := decodeJSON[memberListJSON](t, "member list",
			runEtcdctl(t, etcdctl, s.endpoints[:1], "", "member", "list", "-w", "json").Stdout)
		if len(list.Members) != 2 || list.Members[0].IsLearner || list.Members[1].IsLearner {
			t.Fatalf("member list after promote: %+v", list)
		}
		return id
	}

	id := addLearnerAndPromote()
	if _, err := c.Put(ctx, "two-members", "1"); err != nil {
		t.Fatal(err)
	}

	// A plain etcdctl member remove: the member's consensus exits as removed, and the stack lets it go. As in
	// etcd, a member connected for less than 5 s counts as not yet active, so the removal is refused until then.
	waittest.Until(t, time.Minute, 200*time.Millisecond, "etcdctl member remove", func() bool {
		res := runEtcdctl(t, etcdctl, s.endpoints[:1], "", "member", "remove", id)
		if res.ExitCode != 0 && !strings.Contains(res.Stderr, "unhealthy cluster") {
			t.Fatalf("member remove: %s%s", res.Stdout, res.Stderr)
		}
		return res.ExitCode == 0
	})
	waittest.Until(t, time.Minute, 100*time.Millisecond, "the removed member's processes to leave the stack", func() bool {
		stack := s.stack(t)
		return !slices.ContainsFunc(memberProcesses, func(name string) bool { _, ok := stack.Child(name); return ok })
	})
	var layout struct {
		Removed []int `json:"removed"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "layout.json"))
	if err != nil || json.Unmarshal(raw, &layout) != nil || !slices.Equal(layout.Removed, []int{2}) {
		t.Fatalf("layout.json after the removal: %s %v", raw, err)
	}
	for line := range strings.Lines(s.supervisorLog.String()) {
		if strings.Contains(line, "child exited; restarting") && strings.Contains(line, "consensus-2") {
			t.Fatalf("the removed member was restarted: %s", line)
		}
	}
	if n := storageEndpoints(t, s, "frontend-1"); n != 1 {
		t.Fatalf("after the removal frontend-1's next command line lists %d storages, want 1", n)
	}
	if _, err := c.Put(ctx, "alone-again", "1"); err != nil {
		t.Fatal(err)
	}

	// The runbook: the same name again, on a wiped data dir, as a learner, then promoted.
	addLearnerAndPromote("member-2")
	frontend2 := s.client(t, strings.Split(s.stack(t).Meta["client_endpoints"], ",")[1])
	waittest.Until(t, time.Minute, 100*time.Millisecond, "the replacement to serve every key", func() bool {
		resp, err := frontend2.Get(ctx, "alone-again", clientv3.WithSerializable())
		return err == nil && len(resp.Kvs) == 1
	})
	waittest.Until(t, time.Minute, 200*time.Millisecond, "cairn up member remove", func() bool {
		out, err := runCairn(t, "up", "member", "remove", "--data-dir", dir, "member-2")
		if err != nil && !strings.Contains(out, "unhealthy cluster") {
			t.Fatalf("cairn up member remove: %v\n%s", err, out)
		}
		return err == nil
	})
	if _, ok := s.stack(t).Child("storage-2"); ok {
		t.Fatal("cairn up member remove left the member's storage running")
	}
}

// storageEndpoints counts the storages in child's command line (the one it runs on its next start).
func storageEndpoints(t *testing.T, s *upStack, child string) int {
	t.Helper()
	argv := s.child(t, child).Argv
	i := slices.Index(argv, "--storage-endpoints")
	if i < 0 || i+1 >= len(argv) {
		t.Fatalf("%s has no --storage-endpoints: %v", child, argv)
	}
	return len(strings.Split(argv[i+1], ","))
}
