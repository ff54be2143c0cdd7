package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/cairn-kv/cairn"

// goList runs `go list` with args and returns its output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// isTestSupport reports whether a package of the module exists only for tests: everything under
// internal/testing, and the xxxtest packages beside what they support.
func isTestSupport(pkg string) bool {
	rel := strings.TrimPrefix(pkg, module+"/")
	last := rel[strings.LastIndex(rel, "/")+1:]
	return strings.HasPrefix(rel, "internal/testing/") || strings.HasSuffix(last, "test")
}

// TestReleaseBinaryLinksNoTestCode fails when the cairn binary links the testing package or any of the
// module's test-support packages.
func TestReleaseBinaryLinksNoTestCode(t *testing.T) {
	for _, dep := range goList(t, "-deps", ".") {
		if dep == "testing" || (strings.HasPrefix(dep, module+"/") && isTestSupport(dep)) {
			t.Errorf("cmd/cairn links %s", dep)
		}
	}
}

// TestLayoutByRole holds the layout's rules: a product package (api/..., internal/... apart from tools and
// test support) imports no service and no tool, and no service imports a tool or test support. Services may
// import product packages; tools and test support may import anything.
func TestLayoutByRole(t *testing.T) {
	isService := func(p string) bool { return strings.HasPrefix(p, module+"/services/") }
	isTool := func(p string) bool { return strings.HasPrefix(p, module+"/internal/tools/") }
	// One go list for every package: each line is a package and its transitive dependencies.
	lines, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`,
		module+"/api/...", module+"/internal/...", module+"/services/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		if isTestSupport(pkg) || isTool(pkg) {
			continue
		}
		for _, dep := range deps {
			if !strings.HasPrefix(dep, module+"/") || dep == pkg {
				continue
			}
			switch {
			case !isService(pkg) && isService(dep):
				t.Errorf("product package %s imports service %s", pkg, dep)
			case isTool(dep):
				t.Errorf("%s imports tool %s", pkg, dep)
			case isTestSupport(dep):
				t.Errorf("%s imports test support %s", pkg, dep)
			}
		}
	}
}
