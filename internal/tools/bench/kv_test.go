package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestOpConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		build   func() (Op, error)
		wantErr string
	}{
		{"put defaults", func() (Op, error) { return PutOp(PutConfig{Keys: KeySpace{KeySize: 8, KeySpaceSize: 1}, ValSize: 8}) }, ""},
		{"key space too big for key size", func() (Op, error) {
			return PutOp(PutConfig{Keys: KeySpace{KeySize: 1, KeySpaceSize: 1000}})
		}, "cannot hold"},
		{"zero key space", func() (Op, error) { return PutOp(PutConfig{Keys: KeySpace{KeySize: 8}}) }, "positive --key-space-size"},
		{"negative value size", func() (Op, error) {
			return PutOp(PutConfig{Keys: KeySpace{KeySize: 8, KeySpaceSize: 1}, ValSize: -1})
		}, "negative --val-size"},
		{"range bad consistency", func() (Op, error) { return RangeOp(RangeConfig{Key: "a", Consistency: "x"}) }, "l or s"},
		{"range without key", func() (Op, error) { return RangeOp(RangeConfig{}) }, "needs a key"},
		{"txn zero ops", func() (Op, error) { return TxnPutOp(TxnPutConfig{KeySize: 8, KeySpaceSize: 1}) }, "--txn-ops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			op, err := tt.build()
			if tt.wantErr == "" {
				if err != nil || op == nil {
					t.Fatalf("got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestKeySpaceKeys(t *testing.T) {
	t.Parallel()
	keys := KeySpace{KeySize: 8, KeySpaceSize: 300}
	seen := map[string]bool{}
	for n := range int64(600) {
		key := keys.Key(n)
		if len(key) != 8 {
			t.Fatalf("key %d has %d bytes", n, len(key))
		}
		seen[key] = true
	}
	if len(seen) != 300 {
		t.Fatalf("%d distinct keys, want 300 (key numbers wrap at the key space size)", len(seen))
	}
}

// TestKVBenchmarksAgainstEtcd runs each KV benchmark against a real etcd and checks what it wrote.
func TestKVBenchmarksAgainstEtcd(t *testing.T) {
	cluster, check, ctx := startEtcd(t)
	countKeys := func() int64 {
		resp, err := check.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}

	putSequential, _ := PutOp(PutConfig{Keys: KeySpace{KeySize: 8, KeySpaceSize: 120, Sequential: true}, ValSize: 16})
	txnPut, _ := TxnPutOp(TxnPutConfig{KeySize: 8, KeySpaceSize: 1000, ValSize: 16, OpsPerTxn: 4})
	txnDuplicate, _ := TxnPutOp(TxnPutConfig{KeySize: 8, KeySpaceSize: 1, ValSize: 16, OpsPerTxn: 2})
	rangeLinearizable, _ := RangeOp(RangeConfig{Key: "\x00", End: "\xff", Consistency: "l", Limit: 5})
	rangeSerializable, _ := RangeOp(RangeConfig{Key: "\x00", End: "\xff", Consistency: "s", CountOnly: true})
	tests := []struct {
		name       string
		op         Op
		total      int64
		wantErrors int
		wantKeys   int64 // keys in the store after this step
	}{
		{"put sequential keys", putSequential, 240, 0, 120},
		{"txn-put 4 ops per txn", txnPut, 50, 0, 120 + 200 - 120}, // key numbers 0..199 overlap the put's 0..119
		{"txn-put duplicate keys", txnDuplicate, 5, 5, 200},
		{"range linearizable", rangeLinearizable, 100, 0, 200},
		{"range serializable", rangeSerializable, 100, 0, 200},
	}
	runner, err := NewRunner(RunnerConfig{Endpoints: cluster.Endpoints(), Clients: 10, Conns: 3, Total: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runner.cfg.Total = tt.total
			if err := runner.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer runner.Stop(ctx)
			summary, err := runner.Run(ctx, tt.name, tt.op)
			if err != nil {
				t.Fatal(err)
			}
			if summary.Requests+summary.Errors != int(tt.total) || summary.Errors != tt.wantErrors {
				t.Fatalf("requests %d errors %v, want %d errors", summary.Requests, summary.ErrorCounts, tt.wantErrors)
			}
			if tt.wantErrors > 0 && !strings.Contains(strings.Join(mapsKeys(summary.ErrorCounts), ";"), "duplicate key") {
				t.Errorf("errors %v, want etcd's duplicate key error", summary.ErrorCounts)
			}
			if got := countKeys(); got != tt.wantKeys {
				t.Errorf("%d keys in etcd, want %d", got, tt.wantKeys)
			}
		})
	}
}

func mapsKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

func TestCompareTwoTargets(t *testing.T) {
	cluster := etcdreftest.StartCluster(t, 1)
	scenarios, err := StandardScenarios(StandardOptions{SingleClientTotal: 20, ManyClientsTotal: 200})
	if err != nil {
		t.Fatal(err)
	}
	for i := range scenarios { // keep the 1000-client rows small for a unit test
		scenarios[i].Clients, scenarios[i].Conns = min(scenarios[i].Clients, 20), min(scenarios[i].Conns, 4)
	}
	targets := []Target{
		{Name: "etcd", Endpoints: cluster.Endpoints()},
		{Name: "nothing", Endpoints: []string{"127.0.0.1:1"}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results, err := Compare(ctx, CompareConfig{Targets: targets, Scenarios: scenarios, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 8 {
		t.Fatalf("%d results, want 4 scenarios x 2 targets", len(results))
	}
	for i, r := range results {
		wantTarget := targets[i%2].Name
		if r.Target != wantTarget || r.Scenario != scenarios[i/2].Name {
			t.Errorf("result %d is %s/%s, want %s/%s", i, r.Scenario, r.Target, scenarios[i/2].Name, wantTarget)
		}
		if wantTarget == "etcd" && (r.Err != "" || r.Summary.Errors != 0 || r.Summary.Requests != int(scenarios[i/2].Total)) {
			t.Errorf("etcd %s: requests %d errors %v err %q", r.Scenario, r.Summary.Requests, r.Summary.ErrorCounts, r.Err)
		}
		if wantTarget == "nothing" && r.Summary.Requests != 0 {
			t.Errorf("unreachable target served %d requests", r.Summary.Requests)
		}
	}
	var table bytes.Buffer
	if err := WriteComparison(&table, results); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 9 || !strings.Contains(lines[0], "REQ/S") || !strings.Contains(table.String(), "range serializable, 1000 clients, 100 conns") {
		t.Errorf("table:\n%s", table.String())
	}
}
