package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mathrand "math/rand/v2"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// KeySpace generates benchmark keys the way etcd's tool does: a KeySize-byte key holding the varint of a key
// number in [0, KeySpaceSize), zero-padded. etcd's defaults are KeySize 8 and KeySpaceSize 1 (every request
// hits the same key).
type KeySpace struct {
	KeySize      int
	KeySpaceSize int
	// Sequential takes key number seq mod KeySpaceSize instead of a random one.
	Sequential bool
}

// Validate rejects sizes for which some key number would not fit in KeySize bytes.
func (k KeySpace) Validate() error {
	if k.KeySpaceSize <= 0 {
		return fmt.Errorf("bench: expected positive --key-space-size, got %d", k.KeySpaceSize)
	}
	if need := binary.PutVarint(make([]byte, binary.MaxVarintLen64), int64(k.KeySpaceSize-1)); k.KeySize < need {
		return fmt.Errorf("bench: --key-size %d cannot hold %d distinct keys (needs %d bytes)", k.KeySize, k.KeySpaceSize, need)
	}
	return nil
}

// Key returns the key for key number n (taken mod KeySpaceSize).
func (k KeySpace) Key(n int64) string {
	key := make([]byte, k.KeySize)
	binary.PutVarint(key, n%int64(k.KeySpaceSize))
	return string(key)
}

// keyFor picks the key of request seq: sequential or uniformly random over the key space.
func (k KeySpace) keyFor(seq int64) string {
	if k.Sequential {
		return k.Key(seq)
	}
	return k.Key(mathrand.Int64N(int64(k.KeySpaceSize)))
}

// randomValue returns size random bytes: one value shared by every request of a run, as in etcd's tool.
func randomValue(size int) (string, error) {
	if size < 0 {
		return "", fmt.Errorf("bench: negative --val-size %d", size)
	}
	value := make([]byte, size)
	_, _ = rand.Read(value)
	return string(value), nil
}

// PutConfig configures the put benchmark.
type PutConfig struct {
	Keys    KeySpace
	ValSize int
}

// PutOp returns an Op that puts one ValSize-byte value per request.
func PutOp(cfg PutConfig) (Op, error) {
	if err := cfg.Keys.Validate(); err != nil {
		return nil, err
	}
	value, err := randomValue(cfg.ValSize)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, client *clientv3.Client, seq int64) error {
		_, err := client.Put(ctx, cfg.Keys.keyFor(seq), value)
		return err
	}, nil
}

// RangeConfig configures the range benchmark: a Get of Key, or of [Key, End) when End is set.
type RangeConfig struct {
	Key string
	End string
	// Consistency is "l" (linearizable, the default) or "s" (serializable).
	Consistency string
	// Limit caps the number of keys returned; 0 means no limit.
	Limit int64
	// CountOnly asks only for the count of keys.
	CountOnly bool
}

// RangeOp returns an Op that issues one range request per call.
func RangeOp(cfg RangeConfig) (Op, error) {
	if cfg.Key == "" {
		return nil, errors.New("bench: range needs a key")
	}
	var opts []clientv3.OpOption
	switch cfg.Consistency {
	case "", "l":
	case "s":
		opts = append(opts, clientv3.WithSerializable())
	default:
		return nil, fmt.Errorf("bench: --consistency must be l or s, got %q", cfg.Consistency)
	}
	if cfg.Limit < 0 {
		return nil, fmt.Errorf("bench: negative --limit %d", cfg.Limit)
	}
	if cfg.End != "" {
		opts = append(opts, clientv3.WithRange(cfg.End))
	}
	if cfg.Limit > 0 {
		opts = append(opts, clientv3.WithLimit(cfg.Limit))
	}
	if cfg.CountOnly {
		opts = append(opts, clientv3.WithCountOnly())
	}
	return func(ctx context.Context, client *clientv3.Client, _ int64) error {
		_, err := client.Get(ctx, cfg.Key, opts...)
		return err
	}, nil
}

// TxnPutConfig configures the txn-put benchmark: each request is a transaction of OpsPerTxn puts.
type TxnPutConfig struct {
	KeySize      int
	KeySpaceSize int
	ValSize      int
	OpsPerTxn    int
}

// TxnPutOp returns an Op that commits one transaction of OpsPerTxn puts per call; put j of request seq
// writes key number seq*OpsPerTxn+j, as etcd's tool does. With fewer keys than OpsPerTxn a transaction
// repeats a key, which the server rejects ("duplicate key given in txn request"), as etcd would.
func TxnPutOp(cfg TxnPutConfig) (Op, error) {
	if cfg.OpsPerTxn < 1 {
		return nil, fmt.Errorf("bench: --txn-ops must be at least 1, got %d", cfg.OpsPerTxn)
	}
	keys := KeySpace{KeySize: cfg.KeySize, KeySpaceSize: cfg.KeySpaceSize}
	if err := keys.Validate(); err != nil {
		return nil, err
	}
	value, err := randomValue(cfg.ValSize)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, client *clientv3.Client, seq int64) error {
		ops := make([]clientv3.Op, cfg.OpsPerTxn)
		for j := range ops {
			ops[j] = clientv3.OpPut(keys.Key(seq*int64(cfg.OpsPerTxn)+int64(j)), value)
		}
		_, err := client.Txn(ctx).Then(ops...).Commit()
		return err
	}, nil
}
