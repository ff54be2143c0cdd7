package consensus

import (
	"testing"
	"time"
)

func TestTickClock(t *testing.T) {
	const interval = 100 * time.Millisecond
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	// step is one thing that happens to the clock, in order: a wake at ms (lazy or not) that must be handed
	// wantDue ticks, or (restart) the leader heard at ms; after it, the loop's next wake must be wantNext.
	type step struct {
		ms       int
		lazy     bool
		restart  bool
		wantDue  int
		wantNext int
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a leader ticks every interval", []step{
			{ms: 100, wantDue: 1, wantNext: 200},
			{ms: 203, wantDue: 1, wantNext: 300},
			{ms: 250, wantDue: 0, wantNext: 300},
		}},
		{"a stalled leader gets one tick and a new grid", []step{
			{ms: 100, wantDue: 1, wantNext: 200},
			{ms: 750, wantDue: 1, wantNext: 850},
		}},
		{"a follower that hears its leader wakes at the election timeout only", []step{
			{ms: 0, lazy: true, wantDue: 0, wantNext: 1000},
			{ms: 100, lazy: true, restart: true, wantNext: 1100},
			{ms: 201, lazy: true, wantDue: 1, wantNext: 1100},
			{ms: 201, lazy: true, restart: true, wantNext: 1201},
		}},
		{"a follower whose leader went silent is handed the ticks it missed, then ticks every interval", []step{
			{ms: 100, lazy: true, restart: true, wantNext: 1100},
			{ms: 1100, lazy: true, wantDue: 10, wantNext: 1200},
			{ms: 1200, lazy: true, wantDue: 1, wantNext: 1300},
		}},
		{"a vote request is stepped with the ticks owed by then", []step{
			{ms: 100, lazy: true, restart: true, wantNext: 1100},
			{ms: 750, lazy: true, wantDue: 6, wantNext: 1100},
		}},
		{"a long stop is handed two election timeouts at most", []step{
			{ms: 0, lazy: true, restart: true, wantNext: 1000},
			{ms: 60_000, lazy: true, wantDue: 20, wantNext: 61_000},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTickClock(interval, 10, start)
			for i, s := range tt.steps {
				if s.restart {
					c.restart(at(s.ms))
				} else {
					if owes := c.owes(at(s.ms)); owes != (s.wantDue > 0) {
						t.Fatalf("step %d: owes = %v, want %v", i, owes, s.wantDue > 0)
					}
					if due := c.due(at(s.ms), s.lazy); due != s.wantDue {
						t.Fatalf("step %d: due = %d, want %d", i, due, s.wantDue)
					}
				}
				if next := c.next(s.lazy); !next.Equal(at(s.wantNext)) {
					t.Fatalf("step %d: next = %v, want %v", i, next.Sub(start), at(s.wantNext).Sub(start))
				}
			}
		})
	}
}
