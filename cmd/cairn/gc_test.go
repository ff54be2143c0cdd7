package main

import (
	"runtime/debug"
	"testing"
)

// TestGCFlagsApply: apply starts a tuner unless GOMEMLIMIT is set; --memory-limit-mib becomes the runtime's
// limit, and with none the tuner leaves the limit alone (it only paces GOGC); stop gives the previous limit back,
// and a negative limit is refused.
func TestGCFlagsApply(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	for _, tc := range []struct {
		name       string
		limitMiB   int
		gomemlimit string
		wantErr    bool
		wantTuner  bool
		wantLimit  int64 // while applied
	}{
		{"no limit", 0, "", false, true, before},
		{"a limit", 512, "", false, true, 512 << 20},
		{"GOMEMLIMIT wins", 512, "1GiB", false, false, before}, // the runtime read it at start; the flag adds nothing
		{"negative", -1, "", true, false, before},
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
			if (g.tuner != nil) != tc.wantTuner {
				t.Errorf("tuner running: %v, want %v", g.tuner != nil, tc.wantTuner)
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
