package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// cairnVersion is Cairn's own release version (not the etcd API version it serves).
const cairnVersion = "0.1.0-dev"

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of cairn",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "cairn Version: %s\n", cairnVersion)
			fmt.Fprintf(out, "Git SHA: %s\n", gitRevision())
			fmt.Fprintf(out, "Go Version: %s\n", runtime.Version())
			fmt.Fprintf(out, "Go OS/Arch: %s/%s\n", runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// gitRevision is the VCS revision the Go toolchain stamped into the binary, or "unknown" (e.g. go run, or
// -buildvcs=false).
func gitRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	revision, modified := "unknown", false
	for _, setting := range info.Settings {
		switch setting.Key {
		case "vcs.revision":
			revision = setting.Value
		case "vcs.modified":
			modified = setting.Value == "true"
		}
	}
	if modified {
		revision += "-dirty"
	}
	return revision
}
