package mvcc

import (
	"encoding/binary"
	"fmt"
)

// revision is a (main, sub) revision: main is the store revision of a write entry, sub the position of a change
// inside it.
type revision struct {
	main int64
	sub  int64
}

func (a revision) greaterThan(b revision) bool {
	if a.main != b.main {
		return a.main > b.main
	}
	return a.sub > b.sub
}

// revKeyLen is the length of a key in the key bucket: 8 bytes main, '_', 8 bytes sub, and 't' for a tombstone.
const (
	revBytesLen   = 17
	markTombstone = 't'
)

// revKey encodes rev as a key-bucket key. The encoding sorts like the revisions (big-endian), which makes the key
// bucket a revision-ordered log of every change.
func revKey(rev revision, tombstone bool) []byte {
	n := revBytesLen
	if tombstone {
		n++
	}
	b := appendRevKey(make([]byte, 0, n), rev)
	if tombstone {
		b = append(b, markTombstone)
	}
	return b
}

// appendRevKey appends rev's key-bucket key (of a live revision, no tombstone mark) to b.
func appendRevKey(b []byte, rev revision) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(rev.main))
	b = append(b, '_')
	return binary.BigEndian.AppendUint64(b, uint64(rev.sub))
}

// parseRevKey decodes a key-bucket key.
func parseRevKey(b []byte) (revision, bool, error) {
	if len(b) != revBytesLen && len(b) != revBytesLen+1 {
		return revision{}, false, fmt.Errorf("key bucket key of %d bytes, want %d or %d", len(b), revBytesLen, revBytesLen+1)
	}
	rev := revision{main: int64(binary.BigEndian.Uint64(b)), sub: int64(binary.BigEndian.Uint64(b[9:]))}
	return rev, len(b) == revBytesLen+1 && b[revBytesLen] == markTombstone, nil
}

// mainRevPrefix is the smallest key-bucket key of main revision main.
func mainRevPrefix(main int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(main))
	return b
}

func uint64Bytes(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}
