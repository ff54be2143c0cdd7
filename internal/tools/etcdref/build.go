package etcdref

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gofrs/flock"
)

// Version is the etcd release this package builds and runs.
const Version = "v3.7.3"

// BinDirEnv names the environment variable that overrides the binary cache directory.
const BinDirEnv = "CAIRN_ETCD_BIN_DIR"

// Binaries are the absolute paths of the reference etcd server and etcdctl.
type Binaries struct {
	Etcd    string
	Etcdctl string
}

// binarySpec says how to build one binary: a main package that calls into the given etcd module.
type binarySpec struct {
	name       string // file name in BinDir
	module     string // module fetched at Version
	importPath string // package the wrapper's main calls
	mainCall   string // the body of the wrapper's main; empty: build importPath, a main package, as it is
}

func binarySpecs() []binarySpec {
	return []binarySpec{
		{"etcd", "go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/server/v3/etcdmain", "etcdmain.Main(os.Args)"},
		{"etcdctl", "go.etcd.io/etcd/etcdctl/v3", "go.etcd.io/etcd/etcdctl/v3/ctlv3", "ctlv3.MustStart()"},
	}
}

// etcdutlSpec builds etcdutl, whose main package is its module's root.
var etcdutlSpec = binarySpec{"etcdutl", "go.etcd.io/etcd/etcdutl/v3", "go.etcd.io/etcd/etcdutl/v3", ""}

// BuildEtcdutl returns etcdutl (snapshot restore and status for etcd's files) in BinDir, building it from the
// Go module proxy first if it is missing. It is apart from Build so that tests that need only etcd and
// etcdctl do not wait for it.
func BuildEtcdutl(ctx context.Context, logger *slog.Logger) (string, error) {
	if logger == nil {
		logger = slog.Default()
	}
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	build := func(ctx context.Context, _, dest string) error { return goBuild(ctx, etcdutlSpec, dest, logger) }
	if err := ensureBuilt(ctx, dir, []string{etcdutlSpec.name}, build); err != nil {
		return "", err
	}
	return filepath.Join(dir, etcdutlSpec.name), nil
}

// BinDir returns the directory holding the cached binaries: $CAIRN_ETCD_BIN_DIR if set, else
// os.UserCacheDir()/cairn/etcd-<Version>.
func BinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return filepath.Abs(dir)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("etcdref: no cache directory (set %s): %w", BinDirEnv, err)
	}
	return filepath.Join(cache, "cairn", "etcd-"+Version), nil
}

// Build returns the etcd and etcdctl binaries in BinDir, building the missing ones from the Go module proxy
// first. ctx bounds the wait for another builder's lock and the build itself. logger may be nil.
func Build(ctx context.Context, logger *slog.Logger) (Binaries, error) {
	if logger == nil {
		logger = slog.Default()
	}
	dir, err := BinDir()
	if err != nil {
		return Binaries{}, err
	}
	specs := binarySpecs()
	byName := make(map[string]binarySpec, len(specs))
	names := make([]string, len(specs))
	for i, spec := range specs {
		byName[spec.name] = spec
		names[i] = spec.name
	}
	build := func(ctx context.Context, name, dest string) error {
		return goBuild(ctx, byName[name], dest, logger)
	}
	if err := ensureBuilt(ctx, dir, names, build); err != nil {
		return Binaries{}, err
	}
	return Binaries{Etcd: filepath.Join(dir, "etcd"), Etcdctl: filepath.Join(dir, "etcdctl")}, nil
}

// ensureBuilt makes every named file in dir exist as an executable, calling build(ctx, name, tmpPath) for
// each missing one and renaming the result into place. Builders in any number of processes hold a file lock
// while they build, and each re-checks under the lock, so every binary is built once.
func ensureBuilt(ctx context.Context, dir string, names []string, build func(ctx context.Context, name, dest string) error) error {
	if allExecutable(dir, names) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("etcdref: create bin dir: %w", err)
	}
	lock := flock.New(filepath.Join(dir, ".build.lock"))
	locked, err := lock.TryLockContext(ctx, 100*time.Millisecond)
	if err != nil || !locked {
		return fmt.Errorf("etcdref: lock %s: locked=%v: %w", lock.Path(), locked, err)
	}
	defer lock.Unlock()

	for _, name := range names {
		final := filepath.Join(dir, name)
		if isExecutable(final) {
			continue // built by whoever held the lock before us
		}
		tmp := final + ".tmp-" + strconv.Itoa(os.Getpid())
		_ = os.Remove(tmp) // left over from a builder that was killed
		if err := build(ctx, name, tmp); err != nil {
			_ = os.Remove(tmp)
			return err
		}
		if err := os.Rename(tmp, final); err != nil {
			return fmt.Errorf("etcdref: install %s: %w", final, err)
		}
	}
	return nil
}

func allExecutable(dir string, names []string) bool {
	for _, name := range names {
		if !isExecutable(filepath.Join(dir, name)) {
			return false
		}
	}
	return true
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0
}

// goBuild builds spec into dest from a throwaway wrapper module whose main calls spec's package.
func goBuild(ctx context.Context, spec binarySpec, dest string, logger *slog.Logger) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("etcdref: building %s needs the go command: %w", spec.name, err)
	}
	work, err := os.MkdirTemp("", "cairn-etcdref-"+spec.name+"-*")
	if err != nil {
		return fmt.Errorf("etcdref: build dir: %w", err)
	}
	defer os.RemoveAll(work)

	target := "."
	if spec.mainCall == "" {
		target = spec.importPath
	}
	mainSource := fmt.Sprintf("package main\n\nimport (\n\t\"os\"\n\n\t%q\n)\n\nvar _ = os.Args\n\nfunc main() { %s }\n",
		spec.importPath, spec.mainCall)
	if spec.mainCall == "" { // the tools.go pattern: the module requires the main package, which is built as it is
		mainSource = fmt.Sprintf("//go:build tools\n\npackage main\n\nimport _ %q\n", spec.importPath)
	}
	if err := os.WriteFile(filepath.Join(work, "main.go"), []byte(mainSource), 0o644); err != nil {
		return fmt.Errorf("etcdref: write wrapper: %w", err)
	}
	logger.Info("building reference binary from the Go module proxy (once per machine)",
		"binary", spec.name, "module", spec.module, "version", Version, "dest", dest)
	began := time.Now()
	steps := [][]string{
		{"mod", "init", "cairn.build/" + spec.name},
		{"get", spec.module + "@" + Version},
		{"mod", "tidy"},
		{"build", "-trimpath", "-o", dest, target},
	}
	for _, args := range steps {
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GOWORK=off")
		var output bytes.Buffer
		cmd.Stdout, cmd.Stderr = &output, &output
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("etcdref: build %s: go %v: %w\n%s", spec.name, args, err, Tail(output.Bytes(), 4000))
		}
	}
	logger.Info("built reference binary", "binary", spec.name, "dest", dest, "took", time.Since(began).Round(time.Second))
	return nil
}

// Tail returns the last max bytes of text, from a line start where it can.
func Tail(text []byte, max int) []byte {
	if len(text) > max {
		return text[len(text)-max:]
	}
	return text
}
