package watchhub

import (
	"slices"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/config"
)

func TestConfigValidateNamesTheFlag(t *testing.T) {
	tests := []struct {
		name      string
		change    func(*Config)
		wantField string // "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"bare host:port storages", func(c *Config) { c.StorageEndpoints = []string{"127.0.0.1:1", "localhost:2"} }, ""},
		{"bad listen URL", func(c *Config) { c.ListenURL = "ftp://x" }, "--listen-url"},
		{"no storage", func(c *Config) { c.StorageEndpoints = nil }, "--storage-endpoints"},
		{"storage with a path", func(c *Config) { c.StorageEndpoints = []string{"http://127.0.0.1:1/x"} }, "--storage-endpoints"},
		{"no NATS", func(c *Config) { c.NATSURL = "" }, "--nats-url"},
		{"empty window", func(c *Config) { c.WindowRevisions = 0 }, "--window-revisions"},
		{"no stream buffer", func(c *Config) { c.StreamBufferBytes = -1 }, "--stream-buffer-bytes"},
		{"no history page", func(c *Config) { c.HistoryPageSize = 0 }, "HistoryPageSize"},
		{"no storage timeout", func(c *Config) { c.StorageTimeout = 0 }, "--storage-timeout"},
		{"negative poll interval", func(c *Config) { c.StoragePollInterval = -time.Second }, "--storage-poll-interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.change(&cfg)
			err := cfg.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if fields := config.Fields(err); !slices.Contains(fields, tt.wantField) {
				t.Fatalf("Validate() = %v (fields %v), want a FieldError for %s", err, fields, tt.wantField)
			}
		})
	}
}
