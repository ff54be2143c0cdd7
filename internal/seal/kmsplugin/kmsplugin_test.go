package kmsplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// buildPlugin builds cmd/cairn-kms and a key file with one version.
func buildPlugin(t *testing.T) (binary, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	binary = filepath.Join(dir, "cairn-kms")
	out, err := exec.Command("go", "build", "-o", binary, "github.com/cairn-kv/cairn/cmd/cairn-kms").CombinedOutput()
	if err != nil {
		t.Fatalf("build cairn-kms: %v\n%s", err, out)
	}
	keyFile = filepath.Join(dir, "keys.json")
	if _, err := RotateKeyFile(keyFile); err != nil {
		t.Fatal(err)
	}
	return binary, keyFile
}

func TestPluginProvider(t *testing.T) {
	binary, keyFile := buildPlugin(t)
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	cfg, err := seal.ParseConfig([]byte(fmt.Sprintf(`kind: EncryptionConfiguration
resources:
- prefixes: ["/"]
  providers:
  - kms: {name: local-kms, command: %s, args: ["--key-file", %s], timeout: 5s}
`, binary, keyFile)))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(ctx, cfg, seal.Options{Logger: logger, DataKeyUses: 2}, OpenProvider)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()

	sealed, err := ring.Seal(ctx, []byte("/k"), []byte("secret-1"))
	if err != nil {
		t.Fatal(err)
	}
	if p, id := seal.Describe(sealed); p != "local-kms" || id != "v1" {
		t.Fatalf("sealed under %s/%s, want local-kms/v1", p, id)
	}

	// Rotation in the KMS: new data keys are wrapped under v2, values under v1 still open.
	if _, err := RotateKeyFile(keyFile); err != nil {
		t.Fatal(err)
	}
	var rotated []byte
	for range 3 { // DataKeyUses 2: the third seal at most wraps a new data key
		if rotated, err = ring.Seal(ctx, []byte("/k"), []byte("secret-2")); err != nil {
			t.Fatal(err)
		}
	}
	if _, id := seal.Describe(rotated); id != "v2" {
		t.Fatalf("after rotation sealed under %s, want v2", id)
	}
	for _, tt := range []struct {
		sealed []byte
		want   string
	}{{sealed, "secret-1"}, {rotated, "secret-2"}} {
		got, err := ring.Open(ctx, []byte("/k"), tt.sealed)
		if err != nil || string(got) != tt.want {
			t.Fatalf("Open = %q, %v; want %q", got, err, tt.want)
		}
	}
}

// TestPluginKilled kills the plugin process with SIGKILL between calls and in the middle of a stream of calls:
// every call either answers right or fails with seal.ErrUnavailable, and the provider comes back on its own.
func TestPluginKilled(t *testing.T) {
	binary, keyFile := buildPlugin(t)
	provider, err := OpenProvider(seal.KMSConfig{Name: "local-kms", Command: binary, Args: []string{"--key-file", keyFile},
		Timeout: 5 * time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer provider.Close()
	p := provider.(*Provider)
	ctx := context.Background()
	dataKey := bytes.Repeat([]byte{7}, 32)
	keyID, wrapped, err := p.Wrap(ctx, dataKey)
	if err != nil {
		t.Fatal(err)
	}
	kill := func() {
		p.mu.Lock()
		pid := p.client.ReattachConfig().Pid
		p.mu.Unlock()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		kill()
		unavailable := 0
		waittest.Until(t, 10*time.Second, 20*time.Millisecond, "the provider answers again after kill -9 of its plugin", func() bool {
			got, err := p.Unwrap(ctx, keyID, wrapped)
			switch {
			case err == nil && !bytes.Equal(got, dataKey):
				t.Fatalf("round %d: a wrong data key after a kill", round)
			case err != nil && !errors.Is(err, seal.ErrUnavailable):
				t.Fatalf("round %d: error %v is not ErrUnavailable", round, err)
			case err != nil:
				unavailable++
			}
			return err == nil
		})
		t.Logf("round %d: %d unavailable answers before the restart", round, unavailable)
	}
	if p.starts < 4 {
		t.Fatalf("plugin started %d times over 3 kills", p.starts)
	}
	if _, err := os.Stat(keyFile); err != nil {
		t.Fatal(err)
	}
}
