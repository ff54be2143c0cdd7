package wal

import (
	"errors"
	"fmt"
	"os"

	"go.etcd.io/raft/v3/raftpb"
)

// ErrNotReadable is returned by Entries and Term for an index the WAL cannot read back: below what Forget
// kept, above the last entry, or in a segment removed meanwhile.
var ErrNotReadable = errors.New("wal: entry not readable")

// entryLoc is where one entry's record lies: segment seq, byte offset and record size, and the entry's term.
type entryLoc struct {
	off  int64
	term uint64
	seq  uint32
	size uint32
}

// entryIndex locates the records of the entries [first, first+len(locs)), the log as raft's rule leaves it
// (an entry at index i replaces those from i on), so that they can be read back without keeping them in
// memory. prevTerm is the term of entry first-1 (the snapshot's when first follows it).
type entryIndex struct {
	first     uint64
	prevTerm  uint64
	prevKnown bool // prevTerm is known: false after add restarted the index at an entry out of sequence
	locs      []entryLoc
}

// reset empties the index: the next entry is first, and the one before it has term prevTerm.
func (x *entryIndex) reset(first, prevTerm uint64) {
	x.first, x.prevTerm, x.prevKnown, x.locs = first, prevTerm, true, x.locs[:0]
}

// last is the index of the last entry located (first-1 when none is).
func (x *entryIndex) last() uint64 { return x.first + uint64(len(x.locs)) - 1 }

// add locates entry index, replacing the entries from index on. An index below first restarts the index
// there (the entries before it are not known to the index any more); one past the end leaves a gap, which
// starts the index afresh too: the index always describes a contiguous run.
func (x *entryIndex) add(index uint64, loc entryLoc) {
	switch {
	case index < x.first || index > x.last()+1:
		x.reset(index, 0)
		x.prevKnown = false
	case index <= x.last():
		x.locs = x.locs[:index-x.first]
	}
	x.locs = append(x.locs, loc)
}

// forget drops the entries below index, keeping the term of the one before it. It moves the kept locations
// down in place, so the array does not grow with every trim.
func (x *entryIndex) forget(index uint64) {
	if index <= x.first {
		return
	}
	n := min(index-x.first, uint64(len(x.locs)))
	if n > 0 {
		x.prevTerm, x.prevKnown = x.locs[n-1].term, true
	}
	x.locs = x.locs[:copy(x.locs, x.locs[n:])]
	x.first += n
	if len(x.locs) == 0 {
		x.first = index
	}
}

// term is the term of entry i, which must lie in [first-1, last].
func (x *entryIndex) term(i uint64) (uint64, bool) {
	switch {
	case i+1 == x.first:
		return x.prevTerm, x.prevKnown
	case i < x.first || i > x.last():
		return 0, false
	}
	return x.locs[i-x.first].term, true
}

// FirstReadable is the lowest index Entries can read back: the first entry after the newest snapshot, or
// after what Forget dropped.
func (w *WAL) FirstReadable() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.index.first
}

// Forget stops locating the entries below index, so that the index's memory follows the caller's catch-up
// window, and lets ReleaseTo remove the segments that hold only them. The WAL still replays them on Open.
func (w *WAL) Forget(index uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.index.forget(index)
}

// Term returns the term of entry i, for i from FirstReadable()-1 to the last entry; ErrNotReadable otherwise.
func (w *WAL) Term(i uint64) (uint64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, ok := w.index.term(i); ok {
		return t, nil
	}
	return 0, fmt.Errorf("%w: term of %d (readable %d to %d)", ErrNotReadable, i, w.index.first, w.index.last())
}

// readSpan is a run of entries to read back from one segment.
type readSpan struct {
	path  string
	locs  []entryLoc
	first uint64 // the index of locs[0]
}

// Entries reads the entries [lo, hi) back from the segments: at least one, and then as many as fit in
// maxSize bytes of entry data. It returns ErrNotReadable when lo is not readable (see FirstReadable), and
// an error wrapping ErrCorrupt when a record read back is not the entry the index says it is. The segment
// files are read without holding the WAL's lock, so appends go on meanwhile; the entries returned are
// fresh, owned by the caller.
func (w *WAL) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	spans, err := w.spans(lo, hi, maxSize)
	if err != nil {
		return nil, err
	}
	var ents []*raftpb.Entry
	for _, s := range spans {
		if ents, err = readEntries(s, ents); err != nil {
			return nil, err
		}
	}
	return ents, nil
}

// spans copies, under the lock, the locations of the entries Entries returns, grouped by segment.
func (w *WAL) spans(lo, hi, maxSize uint64) ([]readSpan, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, errors.New("wal: closed")
	}
	if lo < w.index.first || lo > w.index.last() || hi <= lo {
		return nil, fmt.Errorf("%w: entries %d to %d (readable %d to %d)", ErrNotReadable, lo, hi,
			w.index.first, w.index.last())
	}
	hi = min(hi, w.index.last()+1)
	var spans []readSpan
	size := uint64(0)
	for i := lo; i < hi; i++ {
		loc := w.index.locs[i-w.index.first]
		size += uint64(loc.size)
		if i > lo && size > maxSize {
			break
		}
		if n := len(spans); n == 0 || spans[n-1].locs[0].seq != loc.seq {
			path, ok := w.segmentPath(loc.seq)
			if !ok {
				return nil, fmt.Errorf("%w: entry %d is in segment %d, which is gone", ErrNotReadable, i, loc.seq)
			}
			spans = append(spans, readSpan{path: path, first: i})
		}
		spans[len(spans)-1].locs = append(spans[len(spans)-1].locs, loc)
	}
	return spans, nil
}

func (w *WAL) segmentPath(seq uint32) (string, bool) {
	for _, s := range w.segments {
		if s.seq == uint64(seq) {
			return s.path, true
		}
	}
	return "", false
}

// readEntries reads a span's records with one read and appends their entries to ents. The entries' data
// alias the read's buffer, which nothing else holds.
func readEntries(s readSpan, ents []*raftpb.Entry) ([]*raftpb.Entry, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: segment %s was removed", ErrNotReadable, s.path)
	}
	if err != nil {
		return nil, fmt.Errorf("wal: read back entries: %w", err)
	}
	defer f.Close()
	start, end := s.locs[0].off, s.locs[len(s.locs)-1].off+int64(s.locs[len(s.locs)-1].size)
	buf := make([]byte, end-start)
	if _, err := f.ReadAt(buf, start); err != nil {
		return nil, fmt.Errorf("wal: read back entries %d to %d from %s: %w", s.first, s.first+uint64(len(s.locs))-1,
			s.path, err)
	}
	for k, loc := range s.locs {
		index := s.first + uint64(k)
		rec, _, err := decodeRecord(buf, int(loc.off-start))
		var e *raftpb.Entry
		if err == nil && rec.typ == recordEntry {
			e, err = aliasEntry(rec.payload)
		}
		if err != nil || rec.typ != recordEntry || e.GetIndex() != index || e.GetTerm() != loc.term {
			return nil, fmt.Errorf("%w: %s at offset %d does not hold entry %d of term %d", ErrCorrupt, s.path,
				loc.off, index, loc.term)
		}
		ents = append(ents, e)
	}
	return ents, nil
}
