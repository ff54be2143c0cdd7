package main

import (
	"runtime/debug"
	"testing"
)

// TestGCFlagsApply: --memory-limit-mib sets the runtime's limit through a tuner unless GOMEMLIMIT is set, stop
// gives the previous limit back, and a negative limit is refused.
func TestGCFlagsApply(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	for _, tc := range []struct {
		name       string
		limitMiB   int
		gomemlimit string
		wantErr    bool
		wantLimit  int64 // while applied
	}{
		{"no limit", 0, "", false, before},
		{"a limit", 512, "", false, 512 << 20},
		{"GOMEMLIMIT wins", 512, "1GiB", false, before}, // the runtime read it at start; the flag adds nothing
		{"negative", -1, "", true, before},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", tc.gomemlimit)
			t.Setenv("GOGC", "100") // leave this process's GC target alone
			g := gcFlags{percent: defaultGCPercent, limitMiB: tc.limitMiB}
			err := g.apply()
			defer g.stop()
			if (err != nil) != tc.wantErr {
				t.Fatalf("apply: %v, want error %v", err, tc.wantErr)
			}
			if got := debug.SetMemoryLimit(-1); got != tc.wantLimit {
				t.Errorf("runtime limit %d while applied, want %d", got, tc.wantLimit)
			}
			g.stop()
			if got := debug.SetMemoryLimit(-1); got != before {
				t.Errorf("runtime limit %d after stop, want %d", got, before)
			}
		})
	}
}
