package watchhub

import (
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/pace"
)

// TestPollPace: a hub's storage polls follow internal/pace's rule with the longest wait pollLongest gives:
// idlePollFactor times StoragePollInterval while watched, unwatchedPollFactor times while not.
func TestPollPace(t *testing.T) {
	const base = 500 * time.Millisecond
	pollPace := pace.New(base, idlePollFactor*base)
	for i, step := range []struct {
		name                string
		stoodStill, watched bool
		want                time.Duration
	}{
		{"still, watched: doubles", true, true, 2 * base},
		{"still, watched: stops at the idle factor", true, true, idlePollFactor * base},
		{"still, watched: stays", true, true, idlePollFactor * base},
		{"still, unwatched: goes past the idle factor", true, false, 8 * base},
		{"still, unwatched: stops at the unwatched factor", true, false, unwatchedPollFactor * base},
		{"stretched unwatched, then watched and still: back under the idle factor", true, true, idlePollFactor * base},
		{"the store moved", false, true, base},
		{"still, unwatched: doubles from the base", true, false, 2 * base},
		{"the store moved, unwatched", false, false, base},
	} {
		pollPace.Longest = pollLongest(base, step.watched)
		if got := pollPace.Next(step.stoodStill); got != step.want {
			t.Fatalf("step %d (%s): wait %v, want %v", i, step.name, got, step.want)
		}
	}
}
