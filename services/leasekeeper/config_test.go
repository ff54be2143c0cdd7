package leasekeeper

import (
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	good := Config{StorageEndpoints: []string{"http://127.0.0.1:23790"}}.WithDefaults()
	tests := []struct {
		name    string
		change  func(*Config)
		wantErr string // "" means valid
	}{
		{"defaults with one storage", func(*Config) {}, ""},
		{"bare host:port storage", func(c *Config) { c.StorageEndpoints = []string{"127.0.0.1:23790", "localhost:23791"} }, ""},
		{"no storage", func(c *Config) { c.StorageEndpoints = nil }, "--storage-endpoints must name"},
		{"bad listen URL", func(c *Config) { c.ListenURL = "ftp://x" }, "--listen-url"},
		{"no NATS", func(c *Config) { c.NATSURL = "" }, "--nats-url"},
		{"negative interval", func(c *Config) { c.CheckpointInterval = -time.Second }, "--checkpoint-interval"},
		{"zero revoke rate", func(c *Config) { c.RevokeRate = -1 }, "--revoke-rate"},
		{"active timeout reaching the takeover", func(c *Config) { c.ActiveTimeout = c.TakeoverTimeout }, "must stop serving before"},
		{"renewals slower than the active timeout", func(c *Config) { c.RenewInterval = 2 * time.Second; c.TakeoverTimeout = 5 * time.Second }, "--renew-interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.change(&cfg)
			err := cfg.Validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestRegisterFlags(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("leasekeeper", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{"--name=k2", "--storage-endpoints=http://a:1, http://b:2", "--nats-url=nats://n:4222",
		"--revoke-rate=500", "--checkpoint-interval=2s", "--takeover-timeout=3s", "--active-timeout=2s"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "k2" || len(cfg.StorageEndpoints) != 2 || cfg.StorageEndpoints[1] != "http://b:2" || cfg.RevokeRate != 500 ||
		cfg.CheckpointInterval != 2*time.Second || cfg.TakeoverTimeout != 3*time.Second || cfg.ActiveTimeout != 2*time.Second {
		t.Fatalf("parsed %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if d := DefaultConfig(); d.RevokeRate != 1000 || d.CheckpointBatch != 1000 || d.ActiveTimeout != time.Second {
		t.Fatalf("defaults %+v, want etcd's rates and a 1s active timeout", d)
	}
}

// TestAdminEndpoint: /metrics says which keeper is active; /health answers on a standby too.
func TestAdminEndpoint(t *testing.T) {
	env := newTestEnv(t, 1)
	cfgA := env.keeperConfig("a")
	cfgA.AdminAddr = "127.0.0.1:0"
	a := env.startKeeper(cfgA)
	waitActive(t, a, 5*time.Second)
	cfgB := env.keeperConfig("b")
	cfgB.AdminAddr = "127.0.0.1:0"
	b := env.startKeeper(cfgB)
	for _, tt := range []struct {
		k      *Keeper
		active string
	}{{a, "cairn_leasekeeper_active 1"}, {b, "cairn_leasekeeper_active 0"}} {
		body := httpGet(t, "http://"+tt.k.AdminAddr()+"/metrics")
		if !strings.Contains(body, tt.active) || !strings.Contains(body, "cairn_leasekeeper_leases") {
			t.Fatalf("%s /metrics lacks %q", tt.k.ID(), tt.active)
		}
		if health := httpGet(t, "http://"+tt.k.AdminAddr()+"/health"); !strings.Contains(health, `"health":"true"`) {
			t.Fatalf("%s /health = %s", tt.k.ID(), health)
		}
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}
