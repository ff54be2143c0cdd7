package mvcc

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestKeyCount: KeyCount counts the keys that exist now, as etcd's etcd_debugging_mvcc_keys_total does, through
// puts, deletes, compaction and a reopen.
func TestKeyCount(t *testing.T) {
	ts := openTestStore(t, Config{})
	steps := []struct {
		name string
		req  *pb.InternalRaftRequest
		want int
	}{
		{"first key", put("a", "1"), 1},
		{"second version of it", put("a", "2"), 1},
		{"second key", put("b", "1"), 2},
		{"third key", put("c", "1"), 3},
		{"delete one", del("a", "", false), 2},
		{"delete a missing key", del("zz", "", false), 2},
		{"put the deleted key again", put("a", "3"), 3},
		{"delete a range", del("b", "d", false), 1},
		{"compact", compact(8), 1},
	}
	for _, step := range steps {
		ts.apply(step.req)
		if got := ts.KeyCount(); got != step.want {
			t.Fatalf("after %s: KeyCount = %d, want %d", step.name, got, step.want)
		}
	}
	if err := ts.Commit(); err != nil {
		t.Fatal(err)
	}
	path := ts.cfg.Path
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	reopened := openTestStore(t, Config{Path: path})
	if got := reopened.KeyCount(); got != 1 {
		t.Fatalf("after reopen: KeyCount = %d, want 1", got)
	}
}
