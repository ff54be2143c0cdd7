package localstack

import (
	"slices"
	"strings"
	"testing"

	"github.com/cairn-kv/cairn/internal/tools/supervisor"
	"github.com/cairn-kv/cairn/services/consensus"
)

// A layout that lost member 2 and gained member 4 (added to the running cluster) plans the stack's children
// around them: no process of member 2, member 4's consensus joins an existing cluster, and every list of
// members skips the removed one.
func TestChildrenAfterMembershipChanges(t *testing.T) {
	dir := t.TempDir()
	l, err := loadLayout(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	l.Members, l.Removed, l.Joined = 4, []int{2}, []int{4}
	if err := l.save(dir); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Binary: "/bin/cairn", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	children, err := s.Plan()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]supervisor.ChildSpec{}
	for _, spec := range children {
		byName[spec.Name] = spec
	}
	for _, gone := range []string{"consensus-2", "storage-2", "frontend-2"} {
		if _, ok := byName[gone]; ok {
			t.Errorf("the removed member's %s is planned", gone)
		}
	}
	for _, want := range []string{"consensus-4", "storage-4", "frontend-4"} {
		if _, ok := byName[want]; !ok {
			t.Errorf("the added member's %s is not planned", want)
		}
	}
	c4, c1 := byName["consensus-4"].Argv, byName["consensus-1"].Argv
	if flagValue(c4, "--initial-cluster-state") != "existing" || flagValue(c1, "--initial-cluster-state") != "new" {
		t.Errorf("--initial-cluster-state: member 4 %q, member 1 %q", flagValue(c4, "--initial-cluster-state"), flagValue(c1, "--initial-cluster-state"))
	}
	if cluster := flagValue(c4, "--initial-cluster"); strings.Contains(cluster, "member-2=") || strings.Count(cluster, "=") != 3 {
		t.Errorf("--initial-cluster %q, want members 1, 3 and 4", cluster)
	}
	if !slices.Equal(byName["consensus-1"].FinalExitCodes, []int{consensus.ExitCodeRemoved}) || byName["storage-1"].FinalExitCodes != nil {
		t.Errorf("final exit codes: consensus %v, storage %v", byName["consensus-1"].FinalExitCodes, byName["storage-1"].FinalExitCodes)
	}
	lk := byName["leasekeeper-2"]
	if eps := flagValue(lk.Argv, "--storage-endpoints"); strings.Count(eps, ",") != 2 ||
		!strings.HasPrefix(eps, flagValue(byName["storage-3"].Argv, "--listen-storage-url")+",") {
		t.Errorf("leasekeeper-2 --storage-endpoints %q: want members 3, 4, 1 (2 is gone)", eps)
	}
	if slices.Contains(lk.DependsOn, "storage-2") {
		t.Errorf("leasekeeper-2 depends on the removed storage: %v", lk.DependsOn)
	}
	if got := s.ClientEndpoints(); len(got) != 3 {
		t.Errorf("client endpoints %v, want one per member", got)
	}
	if _, err := loadLayout(dir, 3); err != nil {
		t.Errorf("--members 3 on a stack of 3 members (numbers 1, 3, 4): %v", err)
	}
}

func TestParseMember(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int
	}{{"member-1", 1}, {"member-12", 12}, {"member-0", 0}, {"m1", 0}, {"member-x", 0}, {"", 0}} {
		got, err := parseMember(tc.name)
		if got != tc.want || (err == nil) != (tc.want != 0) {
			t.Errorf("parseMember(%q) = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}
