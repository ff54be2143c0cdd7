package bench

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestListScenariosAgainstEtcd: the list rows write their keys once (a second run finds them and writes
// nothing), list them all without errors, and count a LIST that does not return exactly those keys as an error.
func TestListScenariosAgainstEtcd(t *testing.T) {
	cluster, check, ctx := startEtcd(t)
	scenarios := ListScenarios(ListOptions{Prefix: "/list/", Keys: 50, ValSize: 100, Total: 20})
	targets := []Target{{Name: "etcd", Endpoints: cluster.Endpoints()}}
	var revisions []int64
	for round := range 2 {
		results, err := Compare(ctx, CompareConfig{Targets: targets, Scenarios: scenarios, DialTimeout: time.Second})
		if err != nil || len(results) != 2 {
			t.Fatalf("round %d: %d results, %v", round, len(results), err)
		}
		for _, r := range results {
			if r.Err != "" || r.Summary.Errors != 0 || r.Summary.Requests != 20 {
				t.Errorf("round %d, %s: %d requests, errors %v, %q", round, r.Scenario, r.Summary.Requests, r.Summary.ErrorCounts, r.Err)
			}
		}
		keys, err := check.Get(ctx, "/list/", clientv3.WithPrefix())
		if err != nil || len(keys.Kvs) != 50 || len(keys.Kvs[0].Value) != 100 {
			t.Fatalf("round %d: the prefix holds %d keys (%v)", round, len(keys.Kvs), err)
		}
		revisions = append(revisions, keys.Header.Revision)
	}
	if revisions[1] != revisions[0] {
		t.Errorf("the second run wrote again: revision %d -> %d", revisions[0], revisions[1])
	}
	if _, err := check.Put(ctx, "/list/extra", "x"); err != nil {
		t.Fatal(err)
	}
	for _, s := range scenarios {
		if err := s.Op(ctx, check, 0); err == nil {
			t.Errorf("%s: a LIST of 51 keys passed for 50", s.Name)
		}
	}
}
