// Package kmsplugintest builds the reference KMS plugin (cmd/cairn-kms) for tests and benchmarks, and keyrings
// that seal with it.
package kmsplugintest

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/seal/kmsplugin"
)

// Build builds cmd/cairn-kms into a temporary directory and writes a key file with one version (v1) beside it.
func Build(tb testing.TB) (binary, keyFile string) {
	tb.Helper()
	dir := tb.TempDir()
	binary, keyFile = filepath.Join(dir, "cairn-kms"), filepath.Join(dir, "keys.json")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/cairn-kv/cairn/cmd/cairn-kms").CombinedOutput(); err != nil {
		tb.Fatalf("build cairn-kms: %v\n%s", err, out)
	}
	if _, err := kmsplugin.RotateKeyFile(keyFile); err != nil {
		tb.Fatal(err)
	}
	return binary, keyFile
}

// Provider is the kms provider line of an EncryptionConfiguration for the plugin binary and keyFile of Build,
// named local-kms.
func Provider(binary, keyFile string) string {
	return fmt.Sprintf("  - kms: {name: local-kms, command: %s, args: [--key-file, %s], timeout: 5s}\n", binary, keyFile)
}

// Keyring builds the plugin and a keyring whose only provider, for every key, is that plugin; it is closed (the
// plugin stopped) at the end of the test.
func Keyring(tb testing.TB, opts seal.Options) *seal.Keyring {
	tb.Helper()
	binary, keyFile := Build(tb)
	cfg, err := seal.ParseConfig([]byte("kind: EncryptionConfiguration\nresources:\n- prefixes: [\"/\"]\n  providers:\n" +
		Provider(binary, keyFile)))
	if err != nil {
		tb.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	k, err := seal.NewKeyring(context.Background(), cfg, opts, kmsplugin.OpenProvider)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = k.Close() })
	return k
}
