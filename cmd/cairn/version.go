package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// cairnVersion is Cairn's own release version (not the etcd API version it serves).
const cairnVersion = "0.1.0-dev"

// newVersionCommand is `cairn version`; `cairn --version` prints the same, as `etcd --version` does.
func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of cairn",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), versionText())
			return err
		},
	}
}

// versionText is what `cairn version` and `cairn --version` print, in etcd's words.
func versionText() string {
	info, _ := debug.ReadBuildInfo()
	var b strings.Builder
	fmt.Fprintf(&b, "cairn Version: %s\n", cairnVersion)
	fmt.Fprintf(&b, "Git SHA: %s\n", buildRevision(info))
	fmt.Fprintf(&b, "Go Version: %s\n", runtime.Version())
	fmt.Fprintf(&b, "Go OS/Arch: %s/%s\n", runtime.GOOS, runtime.GOARCH)
	return b.String()
}

// buildRevision describes the source the binary was built from, as the Go toolchain recorded it: the VCS
// revision, "-dirty" when the tree had changes, and the commit time; without VCS stamping (go run,
// -buildvcs=false, a build outside a checkout) the module version (a tag under `go install ...@v`), or why
// there is none.
func buildRevision(info *debug.BuildInfo) string {
	if info == nil {
		return "unknown (no build info in this binary)"
	}
	var revision, commitTime string
	modified := false
	for _, setting := range info.Settings {
		switch setting.Key {
		case "vcs.revision":
			revision = setting.Value
		case "vcs.time":
			commitTime = setting.Value
		case "vcs.modified":
			modified = setting.Value == "true"
		}
	}
	if revision == "" {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		return "unknown (built without VCS stamping: -buildvcs=false, or outside a git checkout)"
	}
	if modified {
		revision += "-dirty"
	}
	if commitTime != "" {
		revision += " (" + commitTime + ")"
	}
	return revision
}
