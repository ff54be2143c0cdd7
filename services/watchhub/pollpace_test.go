package watchhub

import (
	"testing"
	"time"
)

func TestNextPollWait(t *testing.T) {
	const base = 500 * time.Millisecond
	for _, tc := range []struct {
		name                string
		wait                time.Duration
		stoodStill, watched bool
		want                time.Duration
	}{
		{"the store moved", 4 * base, false, true, base},
		{"the store moved, unwatched", 8 * base, false, false, base},
		{"still, watched: doubles", base, true, true, 2 * base},
		{"still, watched: stops at the idle factor", 4 * base, true, true, idlePollFactor * base},
		{"still, unwatched: goes past the idle factor", 4 * base, true, false, 8 * base},
		{"still, unwatched: stops at the unwatched factor", 8 * base, true, false, unwatchedPollFactor * base},
		{"stretched unwatched, then watched and still: back under the idle factor", 8 * base, true, true, idlePollFactor * base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextPollWait(tc.wait, base, tc.stoodStill, tc.watched); got != tc.want {
				t.Fatalf("nextPollWait(%v, still %v, watched %v) = %v, want %v", tc.wait, tc.stoodStill, tc.watched, got, tc.want)
			}
		})
	}
}
