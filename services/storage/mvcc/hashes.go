package mvcc

import (
	"hash"
	"hash/crc32"
	"slices"
	"sync"
)

// maxCompactHashes is how many compaction hashes a store keeps, as etcd's hashStorageMaxSize.
const maxCompactHashes = 10

// CompactHash is the hash a compaction recorded, etcd's mvcc.KeyValueHash: a CRC-32C of the key bucket's
// revisions up to Revision, counting of those at or below CompactRevision (the compaction before) only the ones
// Revision's compaction keeps. The compaction computes it as it walks the revisions it removes, so checking it
// costs peers no extra pass; members that applied the same log record the same hash.
type CompactHash struct {
	Hash            uint32
	CompactRevision int64
	Revision        int64
}

// compactHashes keeps the newest recorded compaction hashes, in memory as etcd does (a restart forgets them).
type compactHashes struct {
	mu     sync.Mutex
	hashes []CompactHash // ascending Revision
}

func (c *compactHashes) store(h CompactHash) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hashes = append(c.hashes, h)
	slices.SortFunc(c.hashes, func(a, b CompactHash) int { return int(a.Revision - b.Revision) })
	if len(c.hashes) > maxCompactHashes {
		c.hashes = c.hashes[len(c.hashes)-maxCompactHashes:]
	}
}

func (c *compactHashes) byRevision(rev int64) (CompactHash, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.hashes {
		if h.Revision == rev {
			return h, true
		}
	}
	return CompactHash{}, false
}

// CompactHashes returns the recorded compaction hashes, newest first.
func (s *Store) CompactHashes() []CompactHash {
	s.hashes.mu.Lock()
	defer s.hashes.mu.Unlock()
	out := slices.Clone(s.hashes.hashes)
	slices.Reverse(out)
	return out
}

// kvHasher is etcd's: it hashes the key bucket entries of one compaction as the compactor visits them, before
// any is removed.
type kvHasher struct {
	hash            hash.Hash32
	compactRevision int64 // the compaction before
	revision        int64
	keep            map[revision]struct{}
}

func newKVHasher(prevCompactRev, rev int64, keep map[revision]struct{}) *kvHasher {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h.Write(bucketKey)
	return &kvHasher{hash: h, compactRevision: prevCompactRev, revision: rev, keep: keep}
}

// write counts one key bucket entry: every revision above the previous compaction up to the hashed one, and of
// those at or below it only the kept ones (so the hash does not depend on how far earlier removals went).
func (h *kvHasher) write(rev revision, k, v []byte) {
	if rev.main > h.revision {
		return
	}
	if _, kept := h.keep[rev]; rev.main <= h.compactRevision && !kept {
		return
	}
	h.hash.Write(k)
	h.hash.Write(v)
}

func (h *kvHasher) sum() CompactHash {
	return CompactHash{Hash: h.hash.Sum32(), CompactRevision: h.compactRevision, Revision: h.revision}
}
