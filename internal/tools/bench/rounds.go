package bench

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
)

// RoundsSummary is one (scenario, target) cell over several rounds of a comparison.
type RoundsSummary struct {
	Scenario string
	Target   string
	// Rounds is how many rounds measured the cell (a failed cell does not count).
	Rounds int
	// MedianPerSec, MinPerSec and MaxPerSec are over the rounds' throughputs.
	MedianPerSec, MinPerSec, MaxPerSec float64
	// MedianVsBaseline is the median over rounds of the cell's throughput divided by the baseline target's in
	// the same round (0 for the baseline itself, or when no round measured both).
	MedianVsBaseline float64
}

// SummarizeRounds folds the results of several Compare rounds into one cell per (scenario, target), in the
// order they first appear; baseline names the target the others are divided by, round by round.
func SummarizeRounds(rounds [][]ComparisonResult, baseline string) []RoundsSummary {
	type key struct{ scenario, target string }
	var order []key
	perSec, ratios := map[key][]float64{}, map[key][]float64{}
	for _, results := range rounds {
		base := map[string]float64{}
		for _, r := range results {
			if r.Target == baseline && r.Summary.Requests > 0 {
				base[r.Scenario] = r.Summary.RequestsPerSec
			}
		}
		for _, r := range results {
			k := key{r.Scenario, r.Target}
			if _, seen := perSec[k]; !seen {
				order = append(order, k)
				perSec[k] = nil
			}
			if r.Summary.Requests == 0 {
				continue
			}
			perSec[k] = append(perSec[k], r.Summary.RequestsPerSec)
			if b := base[r.Scenario]; b > 0 && r.Target != baseline {
				ratios[k] = append(ratios[k], r.Summary.RequestsPerSec/b)
			}
		}
	}
	out := make([]RoundsSummary, 0, len(order))
	for _, k := range order {
		s := RoundsSummary{Scenario: k.scenario, Target: k.target, Rounds: len(perSec[k]), MedianVsBaseline: median(ratios[k])}
		if s.Rounds > 0 {
			s.MedianPerSec, s.MinPerSec, s.MaxPerSec = median(perSec[k]), slices.Min(perSec[k]), slices.Max(perSec[k])
		}
		out = append(out, s)
	}
	return out
}

// median is the middle value of xs (the mean of the two middle ones for an even count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(xs))
	mid := len(sorted) / 2
	if len(sorted)%2 == 0 {
		return (sorted[mid-1] + sorted[mid]) / 2
	}
	return sorted[mid]
}

// WriteRoundsSummary prints SummarizeRounds as one table.
func WriteRoundsSummary(w io.Writer, rounds [][]ComparisonResult, baseline string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "SCENARIO\tTARGET\tROUNDS\tMEDIAN REQ/S\tMIN\tMAX\tMEDIAN VS %s\n", baseline)
	for _, s := range SummarizeRounds(rounds, baseline) {
		versus := "-"
		if s.MedianVsBaseline > 0 {
			versus = strconv.FormatFloat(s.MedianVsBaseline, 'f', 2, 64) + "x"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%s\n", s.Scenario, s.Target, s.Rounds, s.MedianPerSec,
			s.MinPerSec, s.MaxPerSec, versus)
	}
	return tw.Flush()
}
