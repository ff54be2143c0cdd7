package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/tools/bench"
)

func TestBenchLeaseCommandsAgainstEtcd(t *testing.T) {
	cluster := etcdreftest.StartCluster(t, 1)
	endpoints := strings.Join(cluster.Endpoints(), ",")
	for _, name := range []string{"lease-keepalive", "lease-grant-revoke"} {
		t.Run(name, func(t *testing.T) {
			out, err := runCairn(t, "bench", "--endpoints", endpoints, "--clients", "4", "--conns", "2", "--total", "100",
				"--output", "json", name, "--ttl", "30")
			if err != nil {
				t.Fatal(err)
			}
			var summary bench.Summary
			if err := json.Unmarshal([]byte(out), &summary); err != nil {
				t.Fatalf("output is not one JSON summary: %v\n%s", err, out)
			}
			if summary.Name != name || summary.Requests != 100 || summary.Errors != 0 || summary.Params["ttl"] != "30" {
				t.Fatalf("summary %s: requests %d errors %v params %v", summary.Name, summary.Requests, summary.ErrorCounts, summary.Params)
			}
		})
	}
}
