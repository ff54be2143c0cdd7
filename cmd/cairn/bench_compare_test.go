package main

import (
	"fmt"
	"testing"

	"github.com/cairn-kv/cairn/internal/tools/bench"
)

// TestCompareRoundOrder: even rounds run the targets in reverse, and their results still print baseline first.
func TestCompareRoundOrder(t *testing.T) {
	targets := []bench.Target{{Name: "etcd"}, {Name: "cairn"}}
	names := func(ts []bench.Target) string {
		s := ""
		for _, tt := range ts {
			s += tt.Name + " "
		}
		return s
	}
	for round, want := range map[int]string{1: "etcd cairn ", 2: "cairn etcd ", 3: "etcd cairn "} {
		if got := names(roundOrder(targets, round)); got != want {
			t.Errorf("round %d runs %q, want %q", round, got, want)
		}
	}
	if names(targets) != "etcd cairn " {
		t.Fatalf("roundOrder changed its argument: %q", names(targets))
	}
	ran := []bench.ComparisonResult{
		{Scenario: "put", Target: "cairn"}, {Scenario: "put", Target: "etcd"},
		{Scenario: "range", Target: "cairn"}, {Scenario: "range", Target: "etcd"},
		{Scenario: "txn", Target: "cairn"},
	}
	got := fmt.Sprint(inTargetOrder(ran, targets))
	want := fmt.Sprint([]bench.ComparisonResult{
		{Scenario: "put", Target: "etcd"}, {Scenario: "put", Target: "cairn"},
		{Scenario: "range", Target: "etcd"}, {Scenario: "range", Target: "cairn"},
		{Scenario: "txn", Target: "cairn"},
	})
	if got != want {
		t.Fatalf("in target order:\n got %s\nwant %s", got, want)
	}
}
