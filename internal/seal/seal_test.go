package seal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func secret(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func keyring(t *testing.T, yaml string) *Keyring {
	t.Helper()
	cfg, err := ParseConfig([]byte(yaml))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, yaml)
	}
	k, err := NewKeyring(context.Background(), cfg, Options{}, nil)
	if err != nil {
		t.Fatalf("keyring: %v", err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

func TestParseConfig(t *testing.T) {
	key1, key2 := secret(t, 32), secret(t, 32)
	tests := []struct {
		name    string
		yaml    string
		wantErr string // empty: accepted
	}{
		{"minimal file from the issue", fmt.Sprintf(`kind: EncryptionConfiguration
resources:
- prefixes: ["/"]
  providers:
  - aesgcm:
      keys:
      - name: key1
        secret: %s
  - identity: {}
`, key1), ""},
		{"secretbox and kms", fmt.Sprintf(`kind: EncryptionConfiguration
resources:
- prefixes: ["/registry/secrets/"]
  providers:
  - kms: {name: vault, command: /usr/bin/cairn-kms, timeout: 2s}
  - secretbox: {keys: [{name: k1, secret: %s}]}
`, key1), ""},
		{"unknown provider", `kind: EncryptionConfiguration
resources:
- prefixes: ["/"]
  providers:
  - aescbc: {keys: []}
`, `unknown provider "aescbc"`},
		{"short key", fmt.Sprintf(`kind: EncryptionConfiguration
resources:
- prefixes: ["/"]
  providers:
  - aesgcm: {keys: [{name: k1, secret: %s}]}
`, secret(t, 16)), "secret is 16 bytes, want 32"},
		{"duplicate key name", fmt.Sprintf(`kind: EncryptionConfiguration
resources:
- prefixes: ["/"]
  providers:
  - aesgcm: {keys: [{name: k1, secret: %s}, {name: k1, secret: %s}]}
`, key1, key2), `duplicate key name "k1"`},
		{"same name, other secret, other resource", fmt.Sprintf(`kind: EncryptionConfiguration
resources:
- prefixes: ["/a"]
  providers: [{aesgcm: {keys: [{name: k1, secret: %s}]}}]
- prefixes: ["/b"]
  providers: [{aesgcm: {keys: [{name: k1, secret: %s}]}}]
`, key1, key2), "used with another secret"},
		{"wrong kind", `kind: Secret
resources: [{prefixes: ["/"], providers: [{identity: {}}]}]`, `kind is "Secret"`},
		{"unknown field", fmt.Sprintf(`kind: EncryptionConfiguration
resources:
- prefixes: ["/"]
  providers:
  - aesgcm: {keys: [{name: k1, secret: %s, colour: red}]}
`, key1), "colour"},
		{"kms without command", `kind: EncryptionConfiguration
resources: [{prefixes: ["/"], providers: [{kms: {name: v}}]}]`, "no command"},
		{"name with a colon", fmt.Sprintf(`kind: EncryptionConfiguration
resources: [{prefixes: ["/"], providers: [{aesgcm: {keys: [{name: "a:b", secret: %s}]}}]}]`, key1), "contains ':'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.yaml))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("accepted, want an error with %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q does not say %q", err, tt.wantErr)
			case tt.wantErr != "" && !errors.Is(err, ErrConfig):
				t.Fatalf("error %v is not ErrConfig", err)
			}
		})
	}
}

func TestSealOpen(t *testing.T) {
	ctx := context.Background()
	key1, key2 := secret(t, 32), secret(t, 32)
	aesgcm := keyring(t, fmt.Sprintf(`kind: EncryptionConfiguration
resources:
- prefixes: ["/"]
  providers:
  - aesgcm: {keys: [{name: key1, secret: %s}]}
  - identity: {}
- prefixes: ["/plain/"]
  providers: [{identity: {}}]
`, key1))
	secretbox := keyring(t, fmt.Sprintf(`kind: EncryptionConfiguration
resources: [{prefixes: ["/"], providers: [{secretbox: {keys: [{name: sb1, secret: %s}]}}]}]`, key2))
	// key2 primary, key1 still opens: the state after a rotation.
	rotated := keyring(t, fmt.Sprintf(`kind: EncryptionConfiguration
resources: [{prefixes: ["/"], providers: [{aesgcm: {keys: [{name: key2, secret: %s}, {name: key1, secret: %s}]}}]}]`, key2, key1))
	// key1 removed.
	removed := keyring(t, fmt.Sprintf(`kind: EncryptionConfiguration
resources: [{prefixes: ["/"], providers: [{aesgcm: {keys: [{name: key2, secret: %s}]}}]}]`, key2))
	// key1's name with another secret.
	wrongSecret := keyring(t, fmt.Sprintf(`kind: EncryptionConfiguration
resources: [{prefixes: ["/"], providers: [{aesgcm: {keys: [{name: key1, secret: %s}]}}]}]`, key2))

	value := []byte("s3cr3t-value")
	sealed, err := aesgcm.Seal(ctx, []byte("/registry/secrets/a"), value)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, value) || !IsSealed(sealed) {
		t.Fatalf("sealed value %q holds the plaintext or no header", sealed)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-20] ^= 1
	sbSealed, err := secretbox.Seal(ctx, []byte("/k"), value)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		ring    *Keyring
		key     string
		stored  []byte
		want    []byte
		wantErr error
	}{
		{"aesgcm round trip", aesgcm, "/registry/secrets/a", sealed, value, nil},
		{"after rotation the old key opens", rotated, "/registry/secrets/a", sealed, value, nil},
		{"removed key", removed, "/registry/secrets/a", sealed, nil, ErrUnknownKey},
		{"same key name, other secret", wrongSecret, "/registry/secrets/a", sealed, nil, ErrAuthFailed},
		{"tampered ciphertext", aesgcm, "/registry/secrets/a", tampered, nil, ErrAuthFailed},
		{"moved to another key", aesgcm, "/registry/secrets/b", sealed, nil, ErrAuthFailed},
		{"plain value with identity", aesgcm, "/registry/secrets/a", value, value, nil},
		{"plain value without identity", rotated, "/registry/secrets/a", value, nil, ErrNotSealed},
		{"secretbox round trip", secretbox, "/k", sbSealed, value, nil},
		{"secretbox value, aesgcm-only file", aesgcm, "/k", sbSealed, nil, ErrUnknownKey},
		{"truncated", aesgcm, "/registry/secrets/a", sealed[:len(Magic)+3], nil, ErrMalformed},
		{"encryption off", nil, "/k", sealed, sealed, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.ring.Open(ctx, []byte(tt.key), tt.stored)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Open error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Fatalf("Open = %q, %v; want %q", got, err, tt.want)
			}
		})
	}

	plain, err := aesgcm.Seal(ctx, []byte("/plain/x"), value)
	if err != nil || !bytes.Equal(plain, value) {
		t.Fatalf("identity resource sealed %q, %v", plain, err)
	}
	if p, id := Describe(sealed); p != KindAESGCM || id != "key1" {
		t.Fatalf("Describe = %s/%s", p, id)
	}
	if p, id := rotated.Primary([]byte("/x")); p != KindAESGCM || id != "key2" {
		t.Fatalf("Primary after rotation = %s/%s", p, id)
	}
}

func TestDataKeyReuseAndRenewal(t *testing.T) {
	ctx := context.Background()
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`kind: EncryptionConfiguration
resources: [{prefixes: ["/"], providers: [{aesgcm: {keys: [{name: k, secret: %s}]}}]}]`, secret(t, 32))))
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKeyring(ctx, cfg, Options{DataKeyUses: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := map[string]int{}
	for i := range 7 {
		sealed, err := k.Seal(ctx, []byte("/k"), []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		h, _, _ := ParseHeader(sealed)
		wrapped[string(h.Wrapped)]++
	}
	// The probe of NewKeyring used one seal of the first data key.
	if len(wrapped) != 3 {
		t.Fatalf("7 seals at 3 per data key used %d data keys, want 3: %v", len(wrapped), wrapped)
	}
}
