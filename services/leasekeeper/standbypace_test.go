package leasekeeper

import (
	"testing"
	"time"
)

func TestStandbyPace(t *testing.T) {
	const base = 200 * time.Millisecond
	for _, tc := range []struct {
		name           string
		current        time.Duration
		holderAnswered bool
		want           time.Duration
	}{
		{"the holder answers: the wait doubles", base, true, 2 * base},
		{"the holder answers again: the wait stops at the stretch", 2 * base, true, standbyStretch * base},
		{"stretched, the holder answers: the wait stays", standbyStretch * base, true, standbyStretch * base},
		{"stretched, no live answer: back to RenewInterval", standbyStretch * base, false, base},
		{"no live answer: RenewInterval", base, false, base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (standbyPace{base: base, current: tc.current}).next(tc.holderAnswered); got != tc.want {
				t.Fatalf("next(%v) after %v = %v, want %v", tc.holderAnswered, tc.current, got, tc.want)
			}
		})
	}
}
