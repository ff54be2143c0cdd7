package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/tools/sealops"
)

// TestEncryptionStatusPlainValues: plain values count as identity, which a file without identity lacks only when
// a key of its resources holds one; plain values of keys in no resource are plain by design.
func TestEncryptionStatusPlainValues(t *testing.T) {
	secret := make([]byte, seal.KeySize)
	_, _ = rand.Read(secret)
	cfg, err := seal.ParseConfig([]byte(`kind: EncryptionConfiguration
resources: [{prefixes: ["/registry/"], providers: [{aesgcm: {keys: [{name: key1, secret: ` +
		base64.StdEncoding.EncodeToString(secret) + `}]}}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	keyring, err := seal.NewKeyring(context.Background(), cfg, seal.Options{Logger: slog.New(slog.DiscardHandler)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		plainKeys []string
		want      string
	}{
		{"only keys in no resource", []string{"foo", "bar"}, "plain: keys in no resource"},
		{"a key of a resource", []string{"foo", "/registry/secrets/a"}, "MISSING from the configuration"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			scan := &sealops.Scan{All: seal.Census{{Provider: seal.KindIdentity}: len(tt.plainKeys)},
				Latest: map[string]seal.KeyRef{}, PlainKeys: map[string]bool{}}
			for _, key := range tt.plainKeys {
				scan.PlainKeys[key] = true
				scan.Latest[key] = seal.KeyRef{Provider: seal.KindIdentity}
			}
			var out bytes.Buffer
			cmd := &cobra.Command{}
			cmd.SetOut(&out)
			if err := printStatus(cmd, scan, keyring); err != nil {
				t.Fatal(err)
			}
			line := strings.Split(strings.TrimSpace(out.String()), "\n")[1]
			if !strings.HasPrefix(line, "identity") || !strings.HasSuffix(line, tt.want) {
				t.Fatalf("status line %q, want identity ... %q", line, tt.want)
			}
		})
	}
}
