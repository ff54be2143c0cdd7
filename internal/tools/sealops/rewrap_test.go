package sealops

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/testing/clustertest"
)

// TestRewrapResumes interrupts a rewrap after its first batch (as a crash or Ctrl-C of `cairn encryption rewrap`
// would: each batch is one Txn, so a rewrap stops between batches or before a batch commits) and runs it again:
// the second run rewrites only the keys the first did not, and then every key's latest value is under the primary
// key and reads back unchanged. The storage restarts on a file without identity over a store holding plain values
// of keys in no resource (the cluster's own readiness key and plain-key): they are not "missing" keys.
func TestRewrapResumes(t *testing.T) {
	key1, key2 := randomSecret(), randomSecret()
	before := testKeyring(t, fmt.Sprintf("{aesgcm: {keys: [{name: key1, secret: %s}]}}", key1))
	after := testKeyring(t, fmt.Sprintf("{aesgcm: {keys: [{name: key2, secret: %s}, {name: key1, secret: %s}]}}", key2, key1))
	var current atomic.Pointer[seal.Keyring]
	current.Store(before)
	c := clustertest.Start(t, clustertest.Options{Members: 1,
		StorageKeyring: func(string) *seal.Keyring { return current.Load() }})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const keys = 250
	for i := range keys {
		if _, err := cli.Put(ctx, fmt.Sprintf("/r/%03d", i), fmt.Sprintf("value-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// A key in no resource (not under "/") stays plain, and does not stop a storage whose file lacks identity.
	if _, err := cli.Put(ctx, "plain-key", "plain-value"); err != nil {
		t.Fatal(err)
	}
	// Rotation: the storage restarts with key2 primary.
	current.Store(after)
	member := c.Members()[0]
	member.StopStorage()
	if err := member.StartStorage(); err != nil {
		t.Fatal(err)
	}
	c.WaitWritable(30 * time.Second)

	interrupted, stop := context.WithCancel(ctx)
	first, err := Rewrap(interrupted, cli, after, RewrapOptions{BatchKeys: 100, TempDir: t.TempDir(),
		Progress: func(RewrapResult) { stop() }})
	if !errors.Is(err, context.Canceled) || first.Candidates != keys || first.Rewritten != 100 {
		t.Fatalf("interrupted rewrap = %+v, %v; want %d candidates, 100 rewritten, context.Canceled", first, err, keys)
	}
	second, err := Rewrap(ctx, cli, after, RewrapOptions{BatchKeys: 100, TempDir: t.TempDir()})
	if err != nil || second.Candidates != keys-100 || second.Rewritten != keys-100 {
		t.Fatalf("resumed rewrap = %+v, %v; want the %d keys left", second, err, keys-100)
	}

	scan, err := ScanCluster(ctx, cli, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for key, ref := range scan.Latest {
		if !after.IsPrimary([]byte(key), ref) {
			t.Errorf("%s still under %s/%s", key, ref.Provider, ref.KeyID)
		}
	}
	if got, err := cli.Get(ctx, "plain-key"); err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "plain-value" {
		t.Fatalf("get plain-key = %v, %v", got, err)
	}
	got, err := cli.Get(ctx, "/r/", clientv3.WithPrefix())
	if err != nil || len(got.Kvs) != keys {
		t.Fatalf("get = %v, %v", got, err)
	}
	for i, kv := range got.Kvs {
		if want := fmt.Sprintf("value-%d", i); string(kv.Value) != want {
			t.Errorf("%s = %q, want %q", kv.Key, kv.Value, want)
		}
	}
}

func randomSecret() string {
	secret := make([]byte, seal.KeySize)
	_, _ = rand.Read(secret)
	return base64.StdEncoding.EncodeToString(secret)
}

func testKeyring(t *testing.T, provider string) *seal.Keyring {
	t.Helper()
	cfg, err := seal.ParseConfig([]byte(`kind: EncryptionConfiguration
resources: [{prefixes: ["/"], providers: [` + provider + `]}]`))
	if err != nil {
		t.Fatal(err)
	}
	k, err := seal.NewKeyring(context.Background(), cfg, seal.Options{Logger: slog.New(slog.DiscardHandler)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
