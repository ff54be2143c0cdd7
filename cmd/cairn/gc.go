package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairn-kv/cairn/internal/gctune"
)

// defaultGCPercent trades memory for CPU: every service's heap is small (tens of MiB) and its garbage is
// per-request, so collecting at 5× the live heap rather than 2× takes most of the GC's share of a core. The
// memory it costs is capped by --memory-limit-mib where one is given (cairn up gives its children one).
const defaultGCPercent = 400

// gcFlags are the Go runtime's memory settings every subcommand takes: --gc-percent and --memory-limit-mib.
type gcFlags struct {
	percent  int
	limitMiB int
	tuner    *gctune.Tuner // while applied
}

func (g *gcFlags) register(flags *pflag.FlagSet) {
	flags.IntVar(&g.percent, "gc-percent", defaultGCPercent, "Go garbage collector target percentage (GOGC); "+
		"the GOGC environment variable, when set, wins")
	flags.IntVar(&g.limitMiB, "memory-limit-mib", 0, "Soft memory limit of the Go runtime in MiB (0: none): "+
		"collect more often rather than grow past it, yet always let the heap grow by at least its live size; "+
		"the GOMEMLIMIT environment variable, when set, wins and is not raised")
}

// gcPercentAnnotation holds, on a subcommand, its own --gc-percent default (withGCPercent).
const gcPercentAnnotation = "cairn/gc-percent"

// withGCPercent makes percent cmd's --gc-percent unless the flag is given: for a service whose live heap grows
// with its load, where defaultGCPercent's headroom over it costs more memory than it saves CPU.
func withGCPercent(cmd *cobra.Command, percent int) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[gcPercentAnnotation] = strconv.Itoa(percent)
	return cmd
}

// percentFor is the --gc-percent cmd runs with: the flag's when given, else cmd's own default, else the flag's.
func (g *gcFlags) percentFor(cmd *cobra.Command) int {
	if cmd == nil || cmd.Flags().Changed("gc-percent") {
		return g.percent
	}
	if percent, err := strconv.Atoi(cmd.Annotations[gcPercentAnnotation]); err == nil {
		return percent
	}
	return g.percent
}

// apply sets the collector's target for cmd (nil: the flag's) and starts the tuner (the memory limit, and
// GOGC's pace for a slow allocator), unless GOMEMLIMIT is set.
func (g *gcFlags) apply(cmd *cobra.Command) error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(g.percentFor(cmd))
	}
	if g.limitMiB < 0 {
		return fmt.Errorf("--memory-limit-mib %d: must not be negative", g.limitMiB)
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		return nil
	}
	// With no --memory-limit-mib the tuner sets no limit; it still paces the GOGC of a process that allocates
	// slowly, so an idle one does not keep GOGC's 16 MiB minimum heap (internal/gctune).
	tuner, err := gctune.New(gctune.Config{Limit: int64(g.limitMiB) << 20})
	if err != nil {
		return fmt.Errorf("--memory-limit-mib: %w", err)
	}
	tuner.Start()
	g.tuner = tuner
	return nil
}

// stop hands the memory limit and GOGC back to what they were before apply started the tuner.
func (g *gcFlags) stop() {
	if g.tuner != nil {
		g.tuner.Stop()
	}
}
