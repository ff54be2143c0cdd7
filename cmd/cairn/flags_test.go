package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// A back-quoted word in a flag's usage becomes its value name in --help (pflag.UnquoteUsage), which garbles
// the line: `--cairn-endpoints cairn up   Cairn client endpoints ... start a  stack`.
func TestNoFlagUsageHasBackQuotes(t *testing.T) {
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		check := func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage has a back quote: %q", cmd.CommandPath(), f.Name, f.Usage)
			}
		}
		cmd.LocalFlags().VisitAll(check)
		cmd.PersistentFlags().VisitAll(check)
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
}
