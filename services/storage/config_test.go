package storage

import (
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/config"
)

func TestConfigValidateNamesTheFlag(t *testing.T) {
	good := DefaultConfig()
	good.DataDir = t.TempDir()
	tests := []struct {
		name      string
		change    func(*Config)
		wantField string // "" means valid
	}{
		{"defaults with a data dir", func(*Config) {}, ""},
		{"negative quota disables it", func(c *Config) { c.QuotaBackendBytes = -1 }, ""},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "--data-dir"},
		{"https listen URL", func(c *Config) { c.ListenURL = "https://127.0.0.1:1" }, "--listen-storage-url"},
		{"listen URL without a port", func(c *Config) { c.ListenURL = "http://127.0.0.1" }, "--listen-storage-url"},
		{"negative batch interval", func(c *Config) { c.BatchInterval = -time.Second }, "--backend-batch-interval"},
		{"negative request timeout", func(c *Config) { c.RequestTimeout = -time.Second }, "--request-timeout"},
		{"negative batch limit", func(c *Config) { c.BatchLimit = -1 }, "--backend-batch-limit"},
		{"negative txn ops", func(c *Config) { c.MaxTxnOps = -1 }, "--max-txn-ops"},
		{"negative min lease TTL", func(c *Config) { c.MinLeaseTTL = -1 }, "--min-lease-ttl"},
		{"unknown auto-compaction mode", func(c *Config) { c.AutoCompactionMode = "hourly" }, "--auto-compaction-mode"},
		{"revision retention as a duration", func(c *Config) {
			c.AutoCompactionMode, c.AutoCompactionRetention = AutoCompactionRevision, "1h"
		}, "--auto-compaction-retention"},
		{"negative compact hash check time", func(c *Config) { c.CompactHashCheckTime = -time.Second }, "--experimental-compact-hash-check-time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
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

// TestIntegrityArgs: the flags `cairn up` passes to its storages give them the configuration it was given.
func TestIntegrityArgs(t *testing.T) {
	tests := []Config{
		{},
		{AutoCompactionMode: AutoCompactionRevision, AutoCompactionRetention: "1000"},
		{AutoCompactionRetention: "30m", InitialCorruptCheck: true, CompactHashCheckEnabled: true, CompactHashCheckTime: 5 * time.Second},
	}
	for _, given := range tests {
		var parsed Config
		fs := flag.NewFlagSet("storage", flag.ContinueOnError)
		parsed.RegisterIntegrityFlags(fs)
		if err := fs.Parse(given.IntegrityArgs()); err != nil {
			t.Fatal(err)
		}
		var want Config
		want.SetIntegrity(given.WithDefaults())
		var got Config
		got.SetIntegrity(parsed)
		if got != want {
			t.Fatalf("args %q parse to %+v, want %+v", given.IntegrityArgs(), got, want)
		}
	}
}
