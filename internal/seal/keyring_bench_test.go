package seal_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/seal/kmsplugin/kmsplugintest"
)

// BenchmarkKeyring compares Seal and Open, from parallel goroutines, under an aesgcm key and under the reference
// KMS plugin (cmd/cairn-kms, built here). Data keys are wrapped once and cached, so the two must be within noise:
// a gap means the plugin is asked something per request (or holds a lock the seals wait on).
//
//	go test -run '^$' -bench Keyring -count 5 ./internal/seal
func BenchmarkKeyring(b *testing.B) {
	modes := []struct {
		name    string
		keyring func(b *testing.B) *seal.Keyring
	}{
		{"aesgcm", aesgcmKeyring},
		{"kms", func(b *testing.B) *seal.Keyring { return kmsplugintest.Keyring(b, seal.Options{}) }},
		// the plugin asked for its primary key every millisecond instead of every 10 s: what that check costs
		// the seals around it
		{"kms-check-1ms", func(b *testing.B) *seal.Keyring {
			return kmsplugintest.Keyring(b, seal.Options{PrimaryCheck: time.Millisecond})
		}},
	}
	ctx := context.Background()
	for _, mode := range modes {
		ring := mode.keyring(b)
		for _, size := range []int{1 << 10, 100 << 10} {
			value := make([]byte, size)
			_, _ = rand.Read(value)
			key := []byte("/registry/secrets/default/bench")
			b.Run(fmt.Sprintf("seal/%s/%dKiB", mode.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := ring.Seal(ctx, key, value); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
			sealed, err := ring.Seal(ctx, key, value)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("open/%s/%dKiB", mode.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := ring.Open(ctx, key, sealed); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

func aesgcmKeyring(b *testing.B) *seal.Keyring {
	secret := make([]byte, seal.KeySize)
	_, _ = rand.Read(secret)
	cfg, err := seal.ParseConfig(fmt.Appendf(nil, `kind: EncryptionConfiguration
resources: [{prefixes: ["/"], providers: [{aesgcm: {keys: [{name: key1, secret: %s}]}}]}]`,
		base64.StdEncoding.EncodeToString(secret)))
	if err != nil {
		b.Fatal(err)
	}
	k, err := seal.NewKeyring(context.Background(), cfg, seal.Options{Logger: slog.New(slog.DiscardHandler)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return k
}
