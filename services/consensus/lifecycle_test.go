package consensus_test

import (
	"context"
	"testing"
	"time"

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
	if _, err := consensus.New(cfg, consensus.Deps{}); err == nil {
		t.Fatal("New with neither peer URLs nor peer listeners succeeded")
	}
}
