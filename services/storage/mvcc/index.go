package mvcc

import (
	"bytes"
	"sync"

	"github.com/google/btree"
)

// keyVersion is one revision of one key as the index remembers it: enough to answer Range's keys-only and
// count-only queries, compares and lease bookkeeping without reading bbolt.
type keyVersion struct {
	rev       revision
	created   int64 // create_revision; 0 for a tombstone
	version   int64 // version; 0 for a tombstone
	lease     int64
	tombstone bool
}

// keyHistory is every retained revision of one key, oldest first. A tombstone ends a generation; the next put
// starts a new one with version 1.
type keyHistory struct {
	key  []byte
	revs revList
}

// at returns the version of the key visible at main revision atRev, if the key existed then.
func (h *keyHistory) at(atRev int64) (keyVersion, bool) {
	return h.before(func(kv keyVersion) bool { return kv.rev.main > atRev })
}

// before returns the newest version for which after is false (after must be false for a prefix of the versions
// and true for the rest), if it is not a tombstone.
func (h *keyHistory) before(after func(keyVersion) bool) (keyVersion, bool) {
	i := h.revs.search(after) - 1
	if i < 0 {
		return keyVersion{}, false
	}
	kv := h.revs.at(i)
	return kv, !kv.tombstone
}

// latest returns the current version of the key, if it exists.
func (h *keyHistory) latest() (keyVersion, bool) {
	kv, ok := h.revs.last()
	return kv, ok && !kv.tombstone
}

// compact drops the revisions a compaction at atRev makes unreachable: everything before the newest revision at or
// below atRev, and that one too if it is a tombstone older than atRev (a tombstone exactly at atRev stays, so a
// watch from atRev still sees the delete). The retained revisions at or below atRev are added to keep.
func (h *keyHistory) compact(atRev int64, keep map[revision]struct{}) {
	i := h.revs.search(func(kv keyVersion) bool { return kv.rev.main > atRev }) - 1
	if i < 0 {
		return
	}
	if kv := h.revs.at(i); kv.tombstone && kv.rev.main < atRev {
		h.revs.dropBefore(i + 1)
		return
	}
	keep[h.revs.at(i).rev] = struct{}{}
	h.revs.dropBefore(i)
}

// keyIndex maps every key to its history, ordered by key.
type keyIndex struct {
	tree *btree.BTreeG[*keyHistory]
	live int // keys whose latest revision is not a tombstone
	// probes are the keyHistory values a lookup searches the tree with (only their key set): one allocated per
	// lookup was ~180 bytes per put, and concurrent readers each need their own.
	probes sync.Pool
}

func newKeyIndex() *keyIndex {
	return &keyIndex{tree: btree.NewG(32, func(a, b *keyHistory) bool { return bytes.Compare(a.key, b.key) < 0 })}
}

func (ix *keyIndex) get(key []byte) *keyHistory {
	probe, _ := ix.probes.Get().(*keyHistory)
	if probe == nil {
		probe = &keyHistory{}
	}
	probe.key = key
	h, _ := ix.tree.Get(probe)
	probe.key = nil // the pool keeps no caller's key alive
	ix.probes.Put(probe)
	return h
}

// getOrCreate returns key's history, adding an empty one if the key was never seen.
func (ix *keyIndex) getOrCreate(key []byte) *keyHistory {
	if h := ix.get(key); h != nil {
		return h
	}
	h := &keyHistory{key: bytes.Clone(key)}
	ix.tree.ReplaceOrInsert(h)
	return h
}

// put records a new version of key at rev with the given lease, and returns it.
func (ix *keyIndex) put(key []byte, rev revision, lease int64) keyVersion {
	h := ix.getOrCreate(key)
	kv := keyVersion{rev: rev, created: rev.main, version: 1, lease: lease}
	if prev, ok := h.latest(); ok {
		kv.created, kv.version = prev.created, prev.version+1
	} else {
		ix.live++
	}
	h.revs.append(kv)
	return kv
}

// tombstone records the deletion of an existing key at rev.
func (ix *keyIndex) tombstone(key []byte, rev revision) {
	h := ix.get(key)
	h.revs.append(keyVersion{rev: rev, tombstone: true})
	ix.live--
}

// restore appends a revision read back from bbolt (in revision order) as it was stored.
func (ix *keyIndex) restore(key []byte, kv keyVersion) {
	h := ix.getOrCreate(key)
	_, wasLive := h.latest()
	h.revs.append(kv)
	switch {
	case !wasLive && !kv.tombstone:
		ix.live++
	case wasLive && kv.tombstone:
		ix.live--
	}
}

// visit calls f, in key order, for every key history in r, until f returns false.
func (ix *keyIndex) visit(r keyRange, f func(h *keyHistory) bool) {
	if r.single() {
		if h := ix.get(r.key); h != nil {
			f(h)
		}
		return
	}
	ix.tree.AscendGreaterOrEqual(&keyHistory{key: r.key}, func(h *keyHistory) bool {
		if !r.fromKey() && bytes.Compare(h.key, r.end) >= 0 {
			return false
		}
		return f(h)
	})
}

// compact applies a compaction at atRev to every key and returns the revisions at or below atRev that survive.
func (ix *keyIndex) compact(atRev int64) map[revision]struct{} {
	keep := make(map[revision]struct{})
	var empty []*keyHistory
	ix.tree.Ascend(func(h *keyHistory) bool {
		h.compact(atRev, keep)
		if h.revs.len() == 0 {
			empty = append(empty, h)
		}
		return true
	})
	for _, h := range empty {
		ix.tree.Delete(h)
	}
	return keep
}

// keyRange is a key or key range as etcd requests name it: end empty means the single key, end "\x00" means every
// key from key on, otherwise [key, end).
type keyRange struct {
	key, end []byte
}

func (r keyRange) single() bool  { return len(r.end) == 0 }
func (r keyRange) fromKey() bool { return len(r.end) == 1 && r.end[0] == 0 }

// contains reports whether key is in the range.
func (r keyRange) contains(key []byte) bool {
	switch {
	case r.single():
		return bytes.Equal(key, r.key)
	case r.fromKey():
		return bytes.Compare(key, r.key) >= 0
	default:
		return bytes.Compare(key, r.key) >= 0 && bytes.Compare(key, r.end) < 0
	}
}
