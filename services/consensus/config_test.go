package consensus

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigIsValid(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.verifyBootstrap(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateRefusesWhatEtcdRefuses(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no name", func(c *Config) { c.Name = "" }, "--name"},
		{"bad cluster state", func(c *Config) { c.InitialClusterState = "old" }, "--initial-cluster-state"},
		{"short election timeout", func(c *Config) { c.ElectionTimeout = 400 * time.Millisecond },
			"--election-timeout[400ms] should be at least as 5 times as --heartbeat-interval[100ms]"},
		{"long election timeout", func(c *Config) { c.ElectionTimeout = 60 * time.Second },
			"--election-timeout[60000ms] is too long, and should be set less than 50000ms"},
		{"zero election timeout", func(c *Config) { c.ElectionTimeout = 0 }, "--election-timeout must be >0 (set to 0ms)"},
		{"zero heartbeat", func(c *Config) { c.HeartbeatInterval = 0 }, "--heartbeat-interval must be >0 (set to 0ms)"},
		{"peer URL without port", func(c *Config) { c.ListenPeerURLs = []string{"http://localhost"} }, `"host:port"`},
		{"peer URL with another scheme", func(c *Config) { c.InitialAdvertisePeerURLs = []string{"ftp://a:1"} }, "scheme"},
		{"initial cluster without =", func(c *Config) { c.InitialCluster = "default" }, "not name=url"},
		{"no snapshot count", func(c *Config) { c.SnapshotCount = 0 }, "--snapshot-count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.change(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestVerifyBootstrap(t *testing.T) {
	tests := []struct {
		name    string
		cluster string
		want    string
	}{
		{"own name missing", "other=http://localhost:2380", `no member named "default"`},
		{"own URLs differ", "default=http://localhost:2390", "--initial-advertise-peer-urls"},
		{"several URLs for one name", "default=http://localhost:2380,default=http://127.0.0.1:2380", "--initial-advertise-peer-urls"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.InitialCluster = tc.cluster
			if err := cfg.verifyBootstrap(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("verifyBootstrap() = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestFlagsAreEtcds(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("consensus", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{
		"--name", "infra1", "--data-dir", "/tmp/x", "--listen-peer-urls", "http://127.0.0.1:12380",
		"--initial-advertise-peer-urls", "http://127.0.0.1:12380",
		"--initial-cluster", "infra1=http://127.0.0.1:12380,infra2=http://127.0.0.1:12381",
		"--initial-cluster-state", "existing", "--initial-cluster-token", "tkn",
		"--heartbeat-interval", "50", "--election-timeout", "500", "--snapshot-count", "100",
		"--listen-consensus-url", "http://127.0.0.1:2390", "--advertise-storage-url", "http://127.0.0.1:23790",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "infra1" || cfg.HeartbeatInterval != 50*time.Millisecond || cfg.ElectionTimeout != 500*time.Millisecond ||
		cfg.InitialClusterState != ClusterStateExisting || cfg.SnapshotCount != 100 || cfg.ListenPeerURLs[0] != "http://127.0.0.1:12380" {
		t.Fatalf("parsed config %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.electionTicks() != 10 {
		t.Fatalf("election ticks = %d, want 10", cfg.electionTicks())
	}
}

// The IDs real etcd v3.7.3 gave to the cluster
// infra1=http://127.0.0.1:12380,infra2=http://127.0.0.1:12381,infra3=http://127.0.0.1:12382 with
// --initial-cluster-token tkn.
func TestIDsAreEtcds(t *testing.T) {
	ids := map[string]uint64{
		"http://127.0.0.1:12380": 0x77f41cbd71028a3a,
		"http://127.0.0.1:12381": 0x589679c5d4615870,
		"http://127.0.0.1:12382": 0xc65d36d681652794,
	}
	var all []uint64
	for url, want := range ids {
		if got := memberID([]string{url}, "tkn", nil); got != want {
			t.Errorf("member ID of %s = %x, want %x", url, got, want)
		}
		all = append(all, want)
	}
	if got := clusterID(all); got != 0x68dd167ffb49a96d {
		t.Errorf("cluster ID = %x, want 68dd167ffb49a96d", got)
	}
}
