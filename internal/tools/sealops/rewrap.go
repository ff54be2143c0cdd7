package sealops

import (
	"context"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/seal"
)

// RewrapOptions bound a rewrap's batches: at most BatchKeys keys (etcd's --max-txn-ops is 128) and about
// BatchBytes of values (under --max-request-bytes) per Txn.
type RewrapOptions struct {
	BatchKeys  int
	BatchBytes int
	// TempDir holds the snapshot the keys to rewrap are read from (default: the system's).
	TempDir string
	// Progress, if set, is told what the rewrap has done so far after each batch.
	Progress func(RewrapResult)
}

// RewrapResult is what a rewrap did.
type RewrapResult struct {
	Candidates int // keys whose latest value was not under the primary key
	Rewritten  int // keys written again
	Skipped    int // keys deleted or changed by a client meanwhile (a client's write is sealed under the primary)
}

// Rewrap writes again, through the cluster's log, the current value of every key whose latest stored value is
// not sealed by the key that seals it now (keyring must be the cluster's configuration).
func Rewrap(ctx context.Context, cli *clientv3.Client, keyring *seal.Keyring, opts RewrapOptions) (RewrapResult, error) {
	if opts.BatchKeys <= 0 || opts.BatchKeys > 128 {
		opts.BatchKeys = 100
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 1 << 20
	}
	if opts.Progress == nil {
		opts.Progress = func(RewrapResult) {}
	}
	scan, err := ScanCluster(ctx, cli, opts.TempDir)
	if err != nil {
		return RewrapResult{}, err
	}
	var keys []string
	for key, ref := range scan.Latest {
		if !keyring.IsPrimary([]byte(key), ref) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	res := RewrapResult{Candidates: len(keys)}
	for len(keys) > 0 {
		n := min(opts.BatchKeys, len(keys))
		done, err := rewrapBatch(ctx, cli, keys[:n], opts.BatchBytes, &res)
		if err != nil {
			return res, err
		}
		keys = keys[done:]
		opts.Progress(res)
	}
	return res, nil
}

// rewrapBatch reads keys in one read-only Txn and writes back those that fit in maxBytes in one Txn, each put
// guarded by its key's mod_revision; it returns how many keys of keys it handled. When a client changed one of
// them meanwhile, the keys are written one by one.
func rewrapBatch(ctx context.Context, cli *clientv3.Client, keys []string, maxBytes int, res *RewrapResult) (int, error) {
	gets := make([]clientv3.Op, len(keys))
	for i, key := range keys {
		gets[i] = clientv3.OpGet(key)
	}
	read, err := cli.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return 0, fmt.Errorf("read keys from %q: %w", keys[0], err)
	}
	var cmps []clientv3.Cmp
	var puts []clientv3.Op
	size, handled := 0, 0
	for _, r := range read.Responses {
		kvs := r.GetResponseRange().Kvs
		if len(kvs) == 0 {
			res.Skipped++ // deleted since the snapshot
			handled++
			continue
		}
		kv := kvs[0]
		if size > 0 && size+len(kv.Value) > maxBytes {
			break
		}
		size += len(kv.Key) + len(kv.Value)
		handled++
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
		var putOpts []clientv3.OpOption
		if kv.Lease != 0 {
			putOpts = append(putOpts, clientv3.WithLease(clientv3.LeaseID(kv.Lease)))
		}
		puts = append(puts, clientv3.OpPut(string(kv.Key), string(kv.Value), putOpts...))
	}
	if len(puts) == 0 {
		return handled, nil
	}
	write, err := cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
	if err != nil {
		return 0, fmt.Errorf("rewrap keys from %q: %w", keys[0], err)
	}
	if write.Succeeded {
		res.Rewritten += len(puts)
		return handled, nil
	}
	for i := range puts { // one changed meanwhile: key by key, a changed one is already under the primary
		one, err := cli.Txn(ctx).If(cmps[i]).Then(puts[i]).Commit()
		if err != nil {
			return 0, fmt.Errorf("rewrap a key: %w", err)
		}
		if one.Succeeded {
			res.Rewritten++
		} else {
			res.Skipped++
		}
	}
	return handled, nil
}
