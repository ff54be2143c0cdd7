package storage

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/seal/kmsplugin/kmsplugintest"
)

// BenchmarkSealed compares a storage with encryption off, with aesgcm and with a KMS plugin (cmd/cairn-kms, data
// keys cached): puts (1024 in flight, as under etcd's 1000-client put benchmark) and serializable and
// linearizable one-key ranges over the pipeline, with 1 KiB and 100 KiB values.
//
//	go test -run '^$' -bench Sealed -benchtime 2000x ./services/storage
func BenchmarkSealed(b *testing.B) {
	modes := []struct {
		name    string
		keyring func(b *testing.B) *seal.Keyring
	}{
		{"off", func(*testing.B) *seal.Keyring { return nil }},
		{"aesgcm", func(b *testing.B) *seal.Keyring {
			return testKeyring(b, fmt.Sprintf("  - aesgcm: {keys: [{name: k1, secret: %s}]}\n", randomSecret()))
		}},
		{"kms", func(b *testing.B) *seal.Keyring { return kmsplugintest.Keyring(b, seal.Options{}) }},
	}
	for _, size := range []int{1 << 10, 100 << 10} {
		value := make([]byte, size)
		for _, mode := range modes {
			b.Run(fmt.Sprintf("%s/%dKiB", mode.name, size>>10), func(b *testing.B) {
				cfg := testConfig(b, 1)
				cfg.AdminAddr = ""
				m := startMemberWith(b, cfg, Deps{Log: newMemlog(b, 1), Keyring: mode.keyring(b)})
				p := dialPipeline(b, m)
				ctx := context.Background()
				const keys = 100
				for i := range keys {
					if _, err := p.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: fmt.Appendf(nil, "/r/%03d", i), Value: value}}); err != nil {
						b.Fatal(err)
					}
				}
				b.Run("put", func(b *testing.B) {
					runPipelineCalls(b, 1024, func(ctx context.Context, i int64) error {
						_, err := p.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: fmt.Appendf(nil, "/p/%07d", i), Value: value}})
						return err
					})
				})
				for _, serializable := range []bool{true, false} {
					b.Run(fmt.Sprintf("range/serializable=%v", serializable), func(b *testing.B) {
						runPipelineCalls(b, 256, func(ctx context.Context, i int64) error {
							resp, err := p.Range(ctx, &pb.RangeRequest{Key: fmt.Appendf(nil, "/r/%03d", i%keys), Serializable: serializable}, 0)
							if err != nil || len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) != size {
								return fmt.Errorf("range: %v", err)
							}
							return nil
						})
					})
				}
			})
		}
	}
}
