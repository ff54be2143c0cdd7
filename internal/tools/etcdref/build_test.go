package etcdref

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeBuilder counts builds per binary and writes an executable placeholder, slowly enough that concurrent
// callers overlap.
type fakeBuilder struct {
	mu     sync.Mutex
	builds map[string]int
	fail   error
}

func (f *fakeBuilder) build(_ context.Context, name, dest string) error {
	f.mu.Lock()
	f.builds[name]++
	f.mu.Unlock()
	time.Sleep(30 * time.Millisecond)
	if f.fail != nil {
		return f.fail
	}
	return os.WriteFile(dest, []byte("#!/bin/sh\n"), 0o755)
}

func TestEnsureBuilt(t *testing.T) {
	names := []string{"etcd", "etcdctl"}
	tests := []struct {
		name       string
		callers    int
		prebuilt   []string
		fail       error
		wantBuilds map[string]int
		wantErr    bool
	}{
		{"one caller builds both", 1, nil, nil, map[string]int{"etcd": 1, "etcdctl": 1}, false},
		{"concurrent callers build each once", 8, nil, nil, map[string]int{"etcd": 1, "etcdctl": 1}, false},
		{"cached binary is reused", 3, []string{"etcd"}, nil, map[string]int{"etcdctl": 1}, false},
		{"all cached: no build", 3, names, nil, map[string]int{}, false},
		{"failed build installs nothing", 1, nil, errors.New("proxy unreachable"), map[string]int{"etcd": 1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bin")
			os.MkdirAll(dir, 0o755)
			for _, name := range tt.prebuilt {
				os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755)
			}
			builder := &fakeBuilder{builds: map[string]int{}, fail: tt.fail}
			errs := make(chan error, tt.callers)
			for range tt.callers {
				go func() { errs <- ensureBuilt(context.Background(), dir, names, builder.build) }()
			}
			for range tt.callers {
				if err := <-errs; (err != nil) != tt.wantErr {
					t.Fatalf("ensureBuilt error = %v, want error %v", err, tt.wantErr)
				}
			}
			if len(builder.builds) != len(tt.wantBuilds) {
				t.Fatalf("builds = %v, want %v", builder.builds, tt.wantBuilds)
			}
			for name, want := range tt.wantBuilds {
				if builder.builds[name] != want {
					t.Errorf("builds[%s] = %d, want %d", name, builder.builds[name], want)
				}
			}
			entries, _ := os.ReadDir(dir)
			for _, entry := range entries {
				switch entry.Name() {
				case "etcd", "etcdctl", ".build.lock":
				default:
					t.Errorf("left over in bin dir: %s", entry.Name())
				}
			}
			if !tt.wantErr && !allExecutable(dir, names) {
				t.Errorf("binaries missing after success")
			}
			if tt.wantErr && isExecutable(filepath.Join(dir, "etcd")) {
				t.Errorf("a failed build installed etcd")
			}
		})
	}
}

func TestBinDirHonoursEnv(t *testing.T) {
	t.Setenv(BinDirEnv, "/opt/etcd-ref")
	if dir, err := BinDir(); err != nil || dir != "/opt/etcd-ref" {
		t.Fatalf("BinDir = %q, %v", dir, err)
	}
	t.Setenv(BinDirEnv, "")
	t.Setenv("XDG_CACHE_HOME", "/var/cache/x")
	if dir, err := BinDir(); err != nil || dir != "/var/cache/x/cairn/etcd-"+Version {
		t.Fatalf("BinDir = %q, %v", dir, err)
	}
}
