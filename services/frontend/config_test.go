package frontend

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestConfigFlagsAndValidate(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{"--name=fe1", "--listen-client-urls=http://127.0.0.1:0", "--consensus-endpoints=http://127.0.0.1:2390, http://127.0.0.1:2391",
		"--watch-endpoints=http://127.0.0.1:2400", "--max-request-bytes=1024", "--max-txn-ops=4", "--request-timeout=3s"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "fe1" || len(cfg.ConsensusEndpoints) != 2 || cfg.ConsensusEndpoints[1] != "http://127.0.0.1:2391" ||
		cfg.MaxRequestBytes != 1024 || cfg.MaxTxnOps != 4 || cfg.RequestTimeout != 3*time.Second || len(cfg.WatchEndpoints) != 1 {
		t.Fatalf("parsed %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if d := DefaultConfig(); d.MaxRequestBytes != 1536*1024 || d.MaxTxnOps != 128 || d.RequestTimeout != 7*time.Second ||
		d.ListenClientURLs[0] != "http://127.0.0.1:2379" {
		t.Fatalf("defaults %+v are not etcd's", d)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no backends", func(c *Config) { c.ConsensusEndpoints = nil }, "--consensus-endpoints"},
		{"https", func(c *Config) { c.ListenClientURLs = []string{"https://127.0.0.1:2379"} }, "scheme"},
		{"path", func(c *Config) { c.StorageEndpoints = []string{"http://127.0.0.1:1/x"} }, "path"},
		{"no port", func(c *Config) { c.LeaseEndpoints = []string{"http://127.0.0.1"} }, "host:port"},
		{"zero txn ops", func(c *Config) { c.MaxTxnOps = 0 }, "--max-txn-ops"},
		{"bad level", func(c *Config) { c.LogLevel = "loud" }, "--log-level"},
		{"no name", func(c *Config) { c.Name = "" }, "--name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := cfg
			tc.change(&bad)
			if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error about %s", err, tc.want)
			}
		})
	}
}
