package main

import (
	"runtime/debug"
	"testing"

	"github.com/spf13/cobra"
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
			err := g.apply(nil)
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

// TestGCPercentPerCommand: a subcommand with its own --gc-percent default (withGCPercent) runs with it unless the
// flag is given; others run with the flag's value, given or default. The watchhub has one.
func TestGCPercentPerCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		own  int // 0: none
		args []string
		want int
	}{
		{"no default of its own", 0, nil, defaultGCPercent},
		{"no default of its own, flag given", 0, []string{"--gc-percent", "150"}, 150},
		{"its own default", 200, nil, 200},
		{"its own default, flag given", 200, []string{"--gc-percent", "300"}, 300},
		{"its own default, flag given as the global default", 200, []string{"--gc-percent", "400"}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g gcFlags
			root := &cobra.Command{Use: "cairn"}
			g.register(root.PersistentFlags())
			var got int
			sub := &cobra.Command{Use: "svc", RunE: func(cmd *cobra.Command, _ []string) error {
				got = g.percentFor(cmd)
				return nil
			}}
			if tc.own != 0 {
				withGCPercent(sub, tc.own)
			}
			root.AddCommand(sub)
			root.SetArgs(append([]string{"svc"}, tc.args...))
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("--gc-percent %d, want %d", got, tc.want)
			}
		})
	}
	hub, _, err := newRootCommand().Find([]string{"watchhub"})
	if err != nil {
		t.Fatal(err)
	}
	if got := (&gcFlags{percent: defaultGCPercent}).percentFor(hub); got != watchhubGCPercent {
		t.Fatalf("watchhub --gc-percent %d, want %d", got, watchhubGCPercent)
	}
}
