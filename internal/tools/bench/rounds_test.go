package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func cell(scenario, target string, perSec float64) ComparisonResult {
	r := ComparisonResult{Scenario: scenario, Target: target, Summary: Summary{RequestsPerSec: perSec}}
	if perSec > 0 {
		r.Summary.Requests = 1000
	} else {
		r.Err = "unreachable"
	}
	return r
}

func TestSummarizeRounds(t *testing.T) {
	t.Parallel()
	rounds := [][]ComparisonResult{
		{cell("put", "etcd", 1000), cell("put", "cairn", 500), cell("range", "etcd", 100), cell("range", "cairn", 200)},
		{cell("put", "cairn", 900), cell("put", "etcd", 1000), cell("range", "etcd", 0), cell("range", "cairn", 100)},
		{cell("put", "etcd", 2000), cell("put", "cairn", 1400), cell("range", "etcd", 300), cell("range", "cairn", 150)},
	}
	tests := []struct {
		scenario, target         string
		rounds                   int
		median, min, max, versus float64
	}{
		// ratios per round 0.5, 0.9, 0.7: the median is the paired one, not median(cairn)/median(etcd)
		{"put", "etcd", 3, 1000, 1000, 2000, 0},
		{"put", "cairn", 3, 900, 500, 1400, 0.7},
		// etcd failed in round 2: that round counts for cairn's throughput but not for its ratio
		{"range", "etcd", 2, 200, 100, 300, 0},
		{"range", "cairn", 3, 150, 100, 200, 1.25},
	}
	got := SummarizeRounds(rounds, "etcd")
	if len(got) != len(tests) {
		t.Fatalf("%d cells, want %d: %+v", len(got), len(tests), got)
	}
	for i, tt := range tests {
		g := got[i]
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
		if g.Scenario != tt.scenario || g.Target != tt.target || g.Rounds != tt.rounds || !near(g.MedianPerSec, tt.median) ||
			!near(g.MinPerSec, tt.min) || !near(g.MaxPerSec, tt.max) || !near(g.MedianVsBaseline, tt.versus) {
			t.Errorf("cell %d: got %+v, want %+v", i, g, tt)
		}
	}
	var out bytes.Buffer
	if err := WriteRoundsSummary(&out, rounds, "etcd"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MEDIAN VS etcd", "0.70x", "1.25x"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
