package leasekeeper

import (
	"testing"
	"time"
)

// TestStandbyPace: the standby's looks follow internal/pace's rule with this package's bounds: RenewInterval
// without a live answer, doubling while the holder answers, never past standbyStretch times RenewInterval.
func TestStandbyPace(t *testing.T) {
	const base = 200 * time.Millisecond
	pace := newStandbyPace(base)
	for i, step := range []struct {
		name           string
		holderAnswered bool
		want           time.Duration
	}{
		{"the holder answers: the wait doubles", true, 2 * base},
		{"the holder answers again: the wait stops at the stretch", true, standbyStretch * base},
		{"stretched, the holder answers: the wait stays", true, standbyStretch * base},
		{"stretched, no live answer: back to RenewInterval", false, base},
		{"no live answer: RenewInterval", false, base},
		{"the holder answers once more: doubles again", true, 2 * base},
	} {
		if got := pace.Next(step.holderAnswered); got != step.want {
			t.Fatalf("step %d (%s): wait %v, want %v", i, step.name, got, step.want)
		}
	}
}
