package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestCluster runs the tests that share one 3-member `cairn up`; the crashes come last.
func TestCluster(t *testing.T) {
	s := startUp(t, t.TempDir())
	etcdctl := etcdreftest.Etcdctl(t)
	t.Run("every process serves metrics and health", func(t *testing.T) { testAdminEndpoints(t, s) })
	t.Run("member list", func(t *testing.T) { testMemberList(t, s, etcdctl) })
	t.Run("endpoint status and health", func(t *testing.T) { testEndpointStatus(t, s, etcdctl) })
	t.Run("client v3", func(t *testing.T) { testClientV3(t, s) })
	t.Run("leases are served", func(t *testing.T) { testLeasesServed(t, s) })
	t.Run("storages take turns publishing applied records on NATS", func(t *testing.T) { testAppliedRecordsOnNATS(t, s) })
	t.Run("etcd's monitoring mixin finds its series", func(t *testing.T) { testEtcdMixin(t, s) })
	t.Run("the bus is locked down without TLS", func(t *testing.T) { testPlainBusLockedDown(t, s) })
	t.Run("crashes during writes", func(t *testing.T) { testCrashesDuringWrites(t, s, etcdctl) })
}

func testAdminEndpoints(t *testing.T, s *upStack) {
	for _, child := range s.stack(t).Children {
		base := fmt.Sprintf("http://127.0.0.1:%d", child.Ports["metrics"])
		for path, want := range map[string]string{"/metrics": "go_goroutines", "/health": `"health":"true"`} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Errorf("%s %s: %v", child.Name, path, err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
				t.Errorf("%s %s: %s, body lacks %q", child.Name, path, resp.Status, want)
			}
		}
	}
}

func testMemberList(t *testing.T, s *upStack, etcdctl string) {
	res := runEtcdctl(t, etcdctl, s.endpoints[:1], "", "member", "list", "-w", "json")
	if res.ExitCode != 0 {
		t.Fatalf("member list: %s%s", res.Stdout, res.Stderr)
	}
	list := decodeJSON[memberListJSON](t, "member list", res.Stdout)
	var names, clientURLs []string
	for _, m := range list.Members {
		names = append(names, m.Name)
		clientURLs = append(clientURLs, m.ClientURLs...)
		if m.ID == 0 || len(m.PeerURLs) != 1 || m.IsLearner {
			t.Errorf("member %+v", m)
		}
	}
	slices.Sort(names)
	slices.Sort(clientURLs)
	if want := []string{"member-1", "member-2", "member-3"}; !slices.Equal(names, want) {
		t.Errorf("member names %v, want %v", names, want)
	}
	if want := slices.Sorted(slices.Values(s.endpoints)); !slices.Equal(clientURLs, want) {
		t.Errorf("members advertise %v, the frontends are at %v", clientURLs, want)
	}
	table := runEtcdctl(t, etcdctl, s.endpoints[:1], "", "member", "list", "-w", "table")
	for _, want := range []string{"ID", "STATUS", "NAME", "PEER ADDRS", "CLIENT ADDRS", "IS LEARNER", "started", "member-2"} {
		if !strings.Contains(table.Stdout, want) {
			t.Errorf("member list -w table lacks %q:\n%s", want, table.Stdout)
		}
	}
}

func testEndpointStatus(t *testing.T, s *upStack, etcdctl string) {
	res := runEtcdctl(t, etcdctl, s.endpoints[:1], "", "endpoint", "status", "--cluster", "-w", "json")
	if res.ExitCode != 0 {
		t.Fatalf("endpoint status: %s%s", res.Stdout, res.Stderr)
	}
	statuses := decodeJSON[[]endpointStatusJSON](t, "endpoint status", res.Stdout)
	if len(statuses) != 3 {
		t.Fatalf("endpoint status --cluster: %d endpoints, want 3:\n%s", len(statuses), res.Stdout)
	}
	members := map[uint64]bool{}
	leaders := map[uint64]bool{}
	for _, st := range statuses {
		members[st.Status.Header.MemberID] = true
		leaders[st.Status.Leader] = true
		// etcd v3.7.3 reports storage version 3.7.0 (the STORAGE VERSION column of -w table).
		if st.Status.Version < "3.5.13" || st.Status.DbSize == 0 || st.Status.StorageVersion != "3.7.0" {
			t.Errorf("status of %s: version %q, storage version %q, db size %d", st.Endpoint, st.Status.Version,
				st.Status.StorageVersion, st.Status.DbSize)
		}
	}
	if len(members) != 3 || len(leaders) != 1 || leaders[0] || !members[slices.Collect(mapKeys(leaders))[0]] {
		t.Errorf("each endpoint must describe its own member and agree on one leader among them: members %v leaders %v",
			members, leaders)
	}
	table := runEtcdctl(t, etcdctl, s.endpoints, "", "endpoint", "status", "-w", "table")
	if strings.Count(table.Stdout, "true") < 1 || !strings.Contains(table.Stdout, "IS LEADER") {
		t.Errorf("endpoint status -w table:\n%s%s", table.Stdout, table.Stderr)
	}
	health := runEtcdctl(t, etcdctl, s.endpoints[:1], "", "endpoint", "health", "--cluster", "-w", "table")
	if health.ExitCode != 0 || strings.Count(health.Stdout, "true") != 3 {
		t.Errorf("endpoint health --cluster: exit %d\n%s%s", health.ExitCode, health.Stdout, health.Stderr)
	}
	hashes := runEtcdctl(t, etcdctl, s.endpoints[:1], "", "endpoint", "hashkv", "--cluster", "-w", "json")
	if hashes.ExitCode != 0 || strings.Count(hashes.Stdout, `"hash"`) != 3 {
		t.Errorf("endpoint hashkv --cluster: exit %d\n%s%s", hashes.ExitCode, hashes.Stdout, hashes.Stderr)
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func testClientV3(t *testing.T, s *upStack) {
	c := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put, err := c.Put(ctx, "client/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "client/b", "2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "client/a", "3"); err != nil {
		t.Fatal(err)
	}
	get, err := c.Get(ctx, "client/", clientv3.WithPrefix())
	if err != nil || get.Count != 2 || string(get.Kvs[0].Value) != "3" || get.Kvs[0].Version != 2 {
		t.Fatalf("get prefix: %+v %v", get, err)
	}
	old, err := c.Get(ctx, "client/a", clientv3.WithRev(put.Header.Revision))
	if err != nil || len(old.Kvs) != 1 || string(old.Kvs[0].Value) != "1" {
		t.Fatalf("get at revision %d: %+v %v", put.Header.Revision, old, err)
	}
	serializable, err := c.Get(ctx, "client/a", clientv3.WithSerializable())
	if err != nil || len(serializable.Kvs) != 1 {
		t.Fatalf("serializable get: %+v %v", serializable, err)
	}
	txn, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Value("client/a"), "=", "3")).
		Then(clientv3.OpPut("client/c", "txn"), clientv3.OpGet("client/b")).
		Else(clientv3.OpDelete("client/", clientv3.WithPrefix())).Commit()
	if err != nil || !txn.Succeeded || string(txn.Responses[1].GetResponseRange().Kvs[0].Value) != "2" {
		t.Fatalf("txn: %+v %v", txn, err)
	}
	del, err := c.Delete(ctx, "client/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	if err != nil || del.Deleted != 3 || len(del.PrevKvs) != 3 {
		t.Fatalf("delete prefix: %+v %v", del, err)
	}
	if _, err := c.Compact(ctx, put.Header.Revision); err != nil {
		t.Fatalf("compact: %v", err)
	}
	if _, err := c.Get(ctx, "client/a", clientv3.WithRev(put.Header.Revision-1)); err != rpctypes.ErrCompacted {
		t.Fatalf("get below the compaction: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if _, err := c.Put(ctx, "", "x"); err != rpctypes.ErrEmptyKey {
		t.Errorf("put of an empty key: %v, want %v", err, rpctypes.ErrEmptyKey)
	}
	ops := make([]clientv3.Op, 129)
	for i := range ops {
		ops[i] = clientv3.OpPut(fmt.Sprintf("client/many/%d", i), "x")
	}
	if _, err := c.Txn(ctx).Then(ops...).Commit(); err != rpctypes.ErrTooManyOps {
		t.Errorf("txn of 129 ops: %v, want %v", err, rpctypes.ErrTooManyOps)
	}
	members, err := c.MemberList(ctx)
	if err != nil || len(members.Members) != 3 {
		t.Fatalf("member list: %+v %v", members, err)
	}
	for _, endpoint := range s.endpoints {
		st, err := c.Status(ctx, endpoint)
		if err != nil || st.Header.ClusterId != members.Header.ClusterId || st.Leader == 0 || st.RaftTerm == 0 {
			t.Errorf("status of %s: %+v %v", endpoint, st, err)
		}
	}
}

func testLeasesServed(t *testing.T, s *upStack) {
	c := s.client(t, s.endpoints[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if g, err := c.Grant(ctx, 10); err != nil || g.TTL != 10 {
		t.Errorf("lease grant through the leasekeepers: %v, %v", g, err)
	}
}
