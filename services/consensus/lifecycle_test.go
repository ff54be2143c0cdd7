package consensus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
)

// TestStopTwice: a member's second Stop returns at once, with no error.
func TestStopTwice(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{Members: 1})
	members := c.Members()
	n := members[0].Node()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 2 {
		if err := n.Stop(ctx); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	if err := n.Err(); err != nil {
		t.Fatalf("Err() after Stop = %v, want nil", err)
	}
}

// TestNewRefusesNoPeerListener: a member needs peer URLs to listen on, or listeners bound for it.
func TestNewRefusesNoPeerListener(t *testing.T) {
	cfg := consensus.DefaultConfig()
	cfg.ListenPeerURLs = nil
	_, err := consensus.New(cfg, consensus.Deps{})
	if fields := config.Fields(err); !slices.Equal(fields, []string{"--listen-peer-urls"}) {
		t.Fatalf("New with neither peer URLs nor peer listeners = %v, want a FieldError for --listen-peer-urls", err)
	}
}

// TestValidateNamesTheFlag: each refused setting is a config.FieldError naming its flag.
func TestValidateNamesTheFlag(t *testing.T) {
	tests := []struct {
		name   string
		change func(*consensus.Config)
		want   []string
	}{
		{"no name", func(c *consensus.Config) { c.Name = "" }, []string{"--name"}},
		{"short election timeout", func(c *consensus.Config) { c.ElectionTimeout = 400 * time.Millisecond }, []string{"--election-timeout"}},
		{"bad initial cluster", func(c *consensus.Config) { c.InitialCluster = "default" }, []string{"--initial-cluster"}},
		{"two at once", func(c *consensus.Config) { c.MaxRequestBytes, c.MaxLearners = 0, -1 },
			[]string{"--max-learners", "--max-request-bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := consensus.DefaultConfig()
			tt.change(&cfg)
			fields := config.Fields(cfg.Validate())
			slices.Sort(fields)
			if !slices.Equal(fields, tt.want) {
				t.Fatalf("Validate() refused %v, want %v", fields, tt.want)
			}
		})
	}
}
