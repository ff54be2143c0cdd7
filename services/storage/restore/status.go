package restore

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// Status is `etcdutl snapshot status`'s description of a snapshot file, computed the same way, so the two
// tools print the same numbers for the same file.
type Status struct {
	// Hash is a CRC-32C of every bucket's name, keys and values.
	Hash     uint32 `json:"hash"`
	Revision int64  `json:"revision"`
	// TotalKey counts the live keys (not deleted) in the key bucket.
	TotalKey  int   `json:"totalKey"`
	TotalSize int64 `json:"totalSize"`
	// Version is the storage version recorded in the file ("" for etcd v3.5).
	Version string `json:"version"`
}

// ReadStatus describes the snapshot file at path, checking the database's integrity first.
func ReadStatus(path string) (st Status, err error) {
	if _, err := os.Stat(path); err != nil {
		return st, fmt.Errorf("snapshot status: %w", err)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s is corrupt: %v", ErrNotSnapshot, path, r)
		}
	}()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		return st, fmt.Errorf("%w: %s: %w", ErrNotSnapshot, path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		var problems []error
		for problem := range tx.Check() {
			problems = append(problems, problem)
		}
		if len(problems) > 0 {
			return fmt.Errorf("%w: integrity check of %s found %d errors, first: %w", ErrNotSnapshot, path,
				len(problems), problems[0])
		}
		st.TotalSize = tx.Size()
		if meta := tx.Bucket([]byte("meta")); meta != nil {
			st.Version = string(meta.Get([]byte("storageVersion")))
		}
		return statusBuckets(tx, &st)
	})
	return st, err
}

func statusBuckets(tx *bolt.Tx, st *Status) error {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	live := map[string]struct{}{}
	err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		h.Write(name)
		isKey := bytes.Equal(name, []byte("key"))
		return b.ForEach(func(k, v []byte) error {
			h.Write(k)
			h.Write(v)
			if !isKey {
				return nil
			}
			if len(k) < 17 {
				return fmt.Errorf("%w: key bucket key %q is not a revision", ErrNotSnapshot, k)
			}
			st.Revision = int64(uint64(k[0])<<56 | uint64(k[1])<<48 | uint64(k[2])<<40 | uint64(k[3])<<32 |
				uint64(k[4])<<24 | uint64(k[5])<<16 | uint64(k[6])<<8 | uint64(k[7]))
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return fmt.Errorf("%w: key revision %x: %w", ErrNotSnapshot, k, err)
			}
			if len(k) == 18 && k[17] == 't' {
				delete(live, string(kv.Key))
			} else {
				live[string(kv.Key)] = struct{}{}
			}
			return nil
		})
	})
	st.TotalKey, st.Hash = len(live), h.Sum32()
	return err
}

// Verify checks a snapshot file as a restore would before anything is written: its SHA-256 trailer must be
// present and match, and the database must pass bbolt's integrity check. It returns the file's status.
func Verify(path string) (Status, error) {
	if err := checkTrailer(path); err != nil {
		return Status{}, err
	}
	return ReadStatus(path)
}

// checkTrailer checks that path ends with the SHA-256 of what comes before it.
func checkTrailer(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	size := st.Size()
	if size%512 != sha256.Size {
		return fmt.Errorf("%w: %s (%d bytes) has no sha256 trailer", ErrHash, path, size)
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, io.LimitReader(f, size-sha256.Size)); err != nil {
		return fmt.Errorf("verify: read %s: %w", path, err)
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return fmt.Errorf("verify: read trailer of %s: %w", path, err)
	}
	if !bytes.Equal(sum.Sum(nil), want) {
		return fmt.Errorf("%w: %s: sha256 does not match its trailer", ErrHash, path)
	}
	return nil
}
