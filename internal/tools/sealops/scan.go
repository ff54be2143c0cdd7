package sealops

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// Scan is what sealed the values of one store.
type Scan struct {
	// All counts every stored value (every revision kept) by what sealed it.
	All seal.Census
	// Latest is what sealed each key's latest stored value (for a deleted key, its last value).
	Latest map[string]seal.KeyRef
	// PlainKeys are the keys with a plain value in any kept revision (counted as identity in All).
	PlainKeys map[string]bool
}

// ScanFile reads a snapshot file or a stopped member's storage.db, read-only.
func ScanFile(path string) (*Scan, error) {
	scan := &Scan{All: seal.Census{}, Latest: map[string]seal.KeyRef{}, PlainKeys: map[string]bool{}}
	err := mvcc.ScanValues(path, false, func(kv *mvccpb.KeyValue) error {
		ref := seal.RefOf(kv.Value)
		if !seal.IsSealed(kv.Value) {
			scan.PlainKeys[string(kv.Key)] = true
		}
		scan.All[ref]++
		scan.Latest[string(kv.Key)] = ref // revisions ascend: the last one seen is the latest
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", path, err)
	}
	return scan, nil
}

// ScanCluster saves the cluster's snapshot into a temporary file in dir (removed after) and scans it.
func ScanCluster(ctx context.Context, cli *clientv3.Client, dir string) (*Scan, error) {
	f, err := os.CreateTemp(dir, "cairn-seal-scan-*.db")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := SaveSnapshot(ctx, cli, f); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return ScanFile(f.Name())
}

// SaveSnapshot writes the snapshot of the client's first endpoint to w, as `etcdctl snapshot save` does.
func SaveSnapshot(ctx context.Context, cli *clientv3.Client, w io.Writer) error {
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// DecryptSnapshot writes to out a copy of the snapshot file in with every value opened by keyring: a plain
// snapshot that etcd's tools restore. The integrity hash etcd appends to a saved snapshot is checked on the way
// in and written again for the plain copy. It returns how many values it opened.
func DecryptSnapshot(in, out string, keyring *seal.Keyring) (int, error) {
	raw, err := os.ReadFile(in)
	if err != nil {
		return 0, err
	}
	db, hashed := raw, false
	if len(raw)%512 == sha256.Size {
		db = raw[:len(raw)-sha256.Size]
		if sum := sha256.Sum256(db); string(sum[:]) != string(raw[len(db):]) {
			return 0, fmt.Errorf("snapshot %s: integrity hash mismatch", in)
		}
		hashed = true
	}
	tmp := out + ".part"
	if err := os.WriteFile(tmp, db, 0o600); err != nil {
		return 0, err
	}
	defer os.Remove(tmp)
	opened, err := mvcc.RewriteValues(tmp, func(kv *mvccpb.KeyValue) ([]byte, error) {
		return keyring.Open(context.Background(), kv.Key, kv.Value)
	})
	if err != nil {
		return opened, fmt.Errorf("decrypt %s: %w", in, err)
	}
	if hashed {
		plain, err := os.ReadFile(tmp)
		if err != nil {
			return opened, err
		}
		sum := sha256.Sum256(plain)
		if err := os.WriteFile(tmp, append(plain, sum[:]...), 0o600); err != nil {
			return opened, err
		}
	}
	return opened, os.Rename(tmp, out)
}
