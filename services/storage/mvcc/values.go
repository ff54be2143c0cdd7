package mvcc

import (
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// ErrStopScan, returned by ScanValues' fn, ends the scan early without an error.
var ErrStopScan = errors.New("mvcc: stop scan")

// ScanValues calls fn with every stored KeyValue of the bbolt file at path (every revision kept; tombstones left
// out), newest first when newestFirst. The file is opened read-only and not changed: it serves the offline tools
// (a start's check that the keys configured open the stored values, `cairn encryption status`). The file must not
// be open in a Store.
func ScanValues(path string, newestFirst bool, fn func(kv *mvccpb.KeyValue) error) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("open bbolt %s read-only: %w", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		bucket := tx.Bucket(bucketKey)
		if bucket == nil {
			return nil
		}
		cur := bucket.Cursor()
		first, next := cur.First, cur.Next
		if newestFirst {
			first, next = cur.Last, cur.Prev
		}
		for k, v := first(); k != nil; k, v = next() {
			rev, tombstone, err := parseRevKey(k)
			if err != nil {
				return err
			}
			if tombstone {
				continue
			}
			kv, err := decodeKV(rev, v)
			if err != nil {
				return err
			}
			if err := fn(kv); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ErrStopScan) {
		return nil
	}
	return err
}

// rewriteBatch is how many values RewriteValues changes per bbolt transaction.
const rewriteBatch = 1000

// RewriteValues replaces the value of every stored KeyValue (every revision kept) of the bbolt file at path by
// rewrite(kv), in transactions of rewriteBatch values, and returns how many it rewrote. Only values change:
// keys, revisions and every other bucket stay, so the file is still the same store (its hashes change with its
// values). It is for a copy that no Store has open (`cairn snapshot decrypt`).
func RewriteValues(path string, rewrite func(kv *mvccpb.KeyValue) ([]byte, error)) (int, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return 0, fmt.Errorf("open bbolt %s: %w", path, err)
	}
	defer db.Close()
	rewritten := 0
	var from []byte
	for {
		done := true
		err := db.Update(func(tx *bolt.Tx) error {
			bucket := tx.Bucket(bucketKey)
			if bucket == nil {
				return nil
			}
			type change struct{ key, data []byte }
			var changes []change
			cur := bucket.Cursor()
			k, v := cur.First()
			if from != nil {
				k, v = cur.Seek(from)
			}
			for ; k != nil; k, v = cur.Next() {
				if len(changes) == rewriteBatch {
					from, done = append([]byte(nil), k...), false
					break
				}
				rev, tombstone, err := parseRevKey(k)
				if err != nil {
					return err
				}
				if tombstone {
					continue
				}
				kv, err := decodeKV(rev, v)
				if err != nil {
					return err
				}
				if kv.Value, err = rewrite(kv); err != nil {
					return fmt.Errorf("revision %d.%d of key %q: %w", rev.main, rev.sub, kv.Key, err)
				}
				data, err := proto.Marshal(kv)
				if err != nil {
					return err
				}
				changes = append(changes, change{key: append([]byte(nil), k...), data: data})
			}
			// Put after the walk: a cursor must not see the bucket change under it.
			for _, c := range changes {
				if err := bucket.Put(c.key, c.data); err != nil {
					return err
				}
			}
			rewritten += len(changes)
			return nil
		})
		if err != nil {
			return rewritten, err
		}
		if done {
			return rewritten, nil
		}
	}
}
