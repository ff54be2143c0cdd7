package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestBuildRevision(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	tests := []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"clean checkout", &debug.BuildInfo{Settings: settings("vcs.revision", "abc123", "vcs.time", "2026-12-01T10:00:00Z", "vcs.modified", "false")},
			"abc123 (2026-12-01T10:00:00Z)"},
		{"dirty checkout", &debug.BuildInfo{Settings: settings("vcs.revision", "abc123", "vcs.modified", "true")}, "abc123-dirty"},
		{"go install at a tag", &debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}}, "v0.1.0"},
		{"no stamping", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "unknown (built without VCS stamping"},
		{"no build info", nil, "unknown (no build info"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := buildRevision(tt.info); !strings.HasPrefix(got, tt.want) {
				t.Fatalf("buildRevision = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVersionFlagAndCommandAgree(t *testing.T) {
	run := func(args ...string) string {
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("cairn %v: %v", args, err)
		}
		return out.String()
	}
	flag, command := run("--version"), run("version")
	if flag != command || !strings.HasPrefix(flag, "cairn Version: "+cairnVersion+"\nGit SHA: ") {
		t.Fatalf("cairn --version printed %q, cairn version %q", flag, command)
	}
}
