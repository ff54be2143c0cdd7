// Package mvcctest supports tests of stored data: it changes a member's bbolt file behind its back, as a disk or
// an operator could, so corruption checks have something to find. The file must not be open (the member stopped).
package mvcctest

import (
	"bytes"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// ErrKeyNotFound is returned by TamperValue when no revision of the key is stored.
var ErrKeyNotFound = errors.New("mvcctest: key not stored")

// TamperValue rewrites the value of the newest stored revision of key in the bbolt file at path (etcd's "key"
// bucket layout: revision → marshalled mvccpb.KeyValue), leaving its revisions, version and lease as they were.
// It returns the revision it changed.
func TamperValue(path string, key, value []byte) (int64, error) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	var modRevision int64
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return fmt.Errorf("%s has no key bucket", path)
		}
		var target []byte
		var found *mvccpb.KeyValue
		c := b.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			kv := &mvccpb.KeyValue{}
			if err := proto.Unmarshal(v, kv); err != nil {
				return fmt.Errorf("decode revision %x: %w", k, err)
			}
			if bytes.Equal(kv.Key, key) {
				target, found = bytes.Clone(k), kv
				break
			}
		}
		if found == nil {
			return fmt.Errorf("%q in %s: %w", key, path, ErrKeyNotFound)
		}
		found.Value = value
		data, err := proto.Marshal(found)
		if err != nil {
			return fmt.Errorf("encode %q: %w", key, err)
		}
		modRevision = found.ModRevision
		return b.Put(target, data)
	})
	return modRevision, err
}
