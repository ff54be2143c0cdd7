package leasekeeper

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestKeeperServesGivenListenerAndStopsOnce: a keeper serves the listener its caller bound; Stop may be called
// again (and Crash after it), and only the first call stops the keeper.
func TestKeeperServesGivenListenerAndStopsOnce(t *testing.T) {
	env := newTestEnv(t, 1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := env.keeperConfig("lk1")
	cfg.ListenURL = "http://127.0.0.1:1" // not bound: the listener is
	k, err := New(cfg, Deps{Logger: testLogger(t), Listener: lis})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := "http://" + lis.Addr().String(); k.URL() != want {
		t.Fatalf("URL() = %s, want the given listener's %s", k.URL(), want)
	}
	waittest.Until(t, 10*time.Second, 10*time.Millisecond, "the keeper to be active", k.Active)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := k.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	k.Crash()
	if k.Active() {
		t.Fatal("a stopped keeper is still active")
	}
}

// TestValidateNamesTheFlag: each refused setting is a config.FieldError naming its flag.
func TestValidateNamesTheFlag(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"valid", func(*Config) {}, nil},
		{"no storage", func(c *Config) { c.StorageEndpoints = nil }, []string{"--storage-endpoints"}},
		{"no revoke rate", func(c *Config) { c.RevokeRate = -1 }, []string{"--revoke-rate"}},
		{"active timeout reaching the takeover", func(c *Config) { c.ActiveTimeout = c.TakeoverTimeout }, []string{"--active-timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{StorageEndpoints: []string{"http://127.0.0.1:23790"}}.WithDefaults()
			tt.change(&cfg)
			fields := config.Fields(cfg.Validate())
			slices.Sort(fields)
			if !slices.Equal(fields, tt.want) {
				t.Fatalf("Validate() refused %v, want %v", fields, tt.want)
			}
		})
	}
}
