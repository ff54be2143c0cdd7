package wal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cairn-kv/cairn/internal/datadir"
	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sys/unix"
)

// DefaultSegmentSize is the size at which the WAL starts a new segment (etcd's 64 MiB).
const DefaultSegmentSize = 64 << 20

// Options tune a WAL; the zero value takes the defaults.
type Options struct {
	// SegmentSize is the size at which a new segment is started; 0 means DefaultSegmentSize.
	SegmentSize int64
	// NoPreallocate turns off preallocating segments (for file systems where it is slow).
	NoPreallocate bool
	// Logger receives notices about repaired tails and removed segments; nil discards them.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.SegmentSize <= 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// State is what Open recovered.
type State struct {
	Metadata []byte
	// HardState is the newest saved HardState (empty when none was saved).
	HardState *raftpb.HardState
	// Snapshot is the newest saved snapshot (empty when none was saved).
	Snapshot *raftpb.Snapshot
	// Entries are the entries after the snapshot, contiguous and in index order.
	Entries []*raftpb.Entry
}

// WAL is an open write-ahead log; see the package documentation.
type WAL struct {
	dir  string
	opts Options

	mu        sync.Mutex
	segments  []segment
	tail      *os.File
	writeOff  int64 // where the next record goes in the tail segment
	syncedOff int64 // everything before it in the tail segment is durable
	buf       []byte

	metadata  []byte
	lastIndex uint64
	hardState *raftpb.HardState
	snapshot  *raftpb.Snapshot
	closed    bool
	// index locates the entries from FirstReadable on, for Entries and Term.
	index entryIndex
}

// Exists reports whether dir holds a WAL.
func Exists(dir string) bool {
	segs, err := listSegments(dir)
	return err == nil && len(segs) > 0
}

// Create makes a new WAL in dir (created if missing, and must not already hold a WAL) whose every segment
// carries metadata.
func Create(dir string, metadata []byte, opts Options) (*WAL, error) {
	if Exists(dir) {
		return nil, fmt.Errorf("wal: %s already holds a WAL", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("wal: create %s: %w", dir, err)
	}
	w := &WAL{
		dir:       dir,
		opts:      opts.withDefaults(),
		metadata:  append([]byte(nil), metadata...),
		hardState: &raftpb.HardState{},
		snapshot:  raftpb.EnsureSnapshot(nil),
		index:     entryIndex{first: 1, prevKnown: true},
	}
	if err := w.startSegment(0, 1); err != nil {
		return nil, err
	}
	return w, nil
}

// Open replays the WAL in dir, repairs a torn tail, and returns the WAL ready for appending together with
// what it holds. It fails with an error wrapping ErrCorrupt when a record is corrupt.
func Open(dir string, opts Options) (*WAL, *State, error) {
	opts = opts.withDefaults()
	segs, err := listSegments(dir)
	if err != nil {
		return nil, nil, err
	}
	if len(segs) == 0 {
		return nil, nil, fmt.Errorf("wal: no segments in %s", dir)
	}
	rp := newReplay()
	var tailScan scanResult
	for i, seg := range segs {
		data, err := os.ReadFile(seg.path)
		if err != nil {
			return nil, nil, fmt.Errorf("wal: read %s: %w", seg.path, err)
		}
		last := i == len(segs)-1
		res, err := scanSegment(seg.path, data, last)
		if err != nil {
			return nil, nil, err
		}
		for _, rec := range res.records {
			if err := rp.apply(rec, seg.seq); err != nil {
				return nil, nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, seg.path, err)
			}
		}
		if last {
			tailScan = res
		}
	}
	st, err := rp.state()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, dir, err)
	}
	w := &WAL{dir: dir, opts: opts, segments: segs}
	if err := w.openTail(tailScan); err != nil {
		return nil, nil, err
	}
	w.metadata, w.hardState, w.snapshot, w.lastIndex = st.Metadata, st.HardState, st.Snapshot, rp.lastIndex()
	w.index = rp.index()
	return w, st, nil
}

// openTail opens the last segment for appending after its last valid record, cutting off a torn tail.
func (w *WAL) openTail(res scanResult) error {
	seg := w.segments[len(w.segments)-1]
	f, err := os.OpenFile(seg.path, os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("wal: open %s: %w", seg.path, err)
	}
	if res.torn {
		w.opts.Logger.Warn("wal: truncating torn tail", "file", seg.path, "offset", res.validSize)
		if err := truncateAndSync(f, int64(res.validSize)); err != nil {
			f.Close()
			return fmt.Errorf("wal: truncate torn tail of %s at offset %d: %w", seg.path, res.validSize, err)
		}
	}
	w.tail, w.writeOff, w.syncedOff = f, int64(res.validSize), int64(res.validSize)
	w.preallocate()
	return nil
}

func truncateAndSync(f *os.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}

// preallocate reserves the tail segment's full size so fdatasync seldom updates metadata; where the file
// system cannot, the WAL simply grows the file.
func (w *WAL) preallocate() {
	if w.opts.NoPreallocate || w.writeOff >= w.opts.SegmentSize {
		return
	}
	_ = unix.Fallocate(int(w.tail.Fd()), 0, 0, w.opts.SegmentSize)
}

// Save appends an optional snapshot received from a leader (which replaces the whole log), entries and an
// optional HardState as one write, followed by one fdatasync when sync is true: Append, then Sync.
func (w *WAL) Save(snap *raftpb.Snapshot, hs *raftpb.HardState, ents []*raftpb.Entry, sync bool) error {
	if err := w.Append(snap, hs, ents); err != nil {
		return err
	}
	if !sync {
		return nil
	}
	return w.Sync()
}

// Append is Save's write without its fdatasync: the records are in the file but durable only after Sync (or
// once a full segment is finished, which syncs it). The raft loop times the two apart.
func (w *WAL) Append(snap *raftpb.Snapshot, hs *raftpb.HardState, ents []*raftpb.Entry) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("wal: closed")
	}
	// One growth to the batch's size: appending a batch larger than any before record by record regrew the
	// buffer by a quarter at a time, copying it each time (a fifth of a leader's CPU under 100 KiB puts).
	buf := slices.Grow(w.buf[:0], entryRecordsSize(ents)+headerSize+hardStateSize)
	if snap != nil && snap.GetMetadata().GetIndex() > 0 {
		payload, err := encodeSnapshot(snap, true)
		if err != nil {
			return err
		}
		buf = appendRecord(buf, recordSnapshot, payload)
		w.snapshot, w.lastIndex = snap, snap.GetMetadata().GetIndex()
		w.index.reset(snap.GetMetadata().GetIndex()+1, snap.GetMetadata().GetTerm())
	}
	// Every record of the batch goes into the tail segment, at writeOff on: a full segment is rotated after.
	seq := uint32(w.segments[len(w.segments)-1].seq)
	for _, e := range ents {
		start := len(buf)
		buf = appendEntryRecord(buf, e)
		w.index.add(e.GetIndex(), entryLoc{off: w.writeOff + int64(start), term: e.GetTerm(), seq: seq,
			size: uint32(len(buf) - start)})
	}
	if len(ents) > 0 {
		w.lastIndex = ents[len(ents)-1].GetIndex()
	}
	if hs != nil && (hs.GetTerm() != 0 || hs.GetVote() != 0 || hs.GetCommit() != 0) {
		buf = appendRecord(buf, recordHardState, encodeHardState(hs))
		w.hardState = hs
	}
	err := w.writeLocked(buf, false)
	// A burst of large values can leave a buffer of tens of MiB; keep only one of an ordinary batch's size.
	w.buf = buf
	if cap(buf) > maxKeptBuffer {
		w.buf = nil
	}
	return err
}

// maxKeptBuffer is the largest append buffer the WAL keeps between batches.
const maxKeptBuffer = 4 << 20

// Sync makes everything appended durable with one fdatasync; it does nothing when nothing is unsynced.
func (w *WAL) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("wal: closed")
	}
	if w.syncedOff == w.writeOff {
		return nil
	}
	return w.writeLocked(nil, true)
}

// SaveSnapshot records a snapshot this member took of its own log (entries after it stay) and syncs.
func (w *WAL) SaveSnapshot(snap *raftpb.Snapshot) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("wal: closed")
	}
	payload, err := encodeSnapshot(snap, false)
	if err != nil {
		return err
	}
	w.snapshot = snap
	return w.writeLocked(appendRecord(nil, recordSnapshot, payload), true)
}

func (w *WAL) writeLocked(buf []byte, sync bool) error {
	if len(buf) == 0 && !sync {
		return nil
	}
	if len(buf) > 0 {
		if _, err := w.tail.WriteAt(buf, w.writeOff); err != nil {
			return fmt.Errorf("wal: write %s at offset %d: %w", w.tail.Name(), w.writeOff, err)
		}
		w.writeOff += int64(len(buf))
	}
	if sync || w.writeOff >= w.opts.SegmentSize {
		if err := unix.Fdatasync(int(w.tail.Fd())); err != nil {
			return fmt.Errorf("wal: fdatasync %s: %w", w.tail.Name(), err)
		}
		w.syncedOff = w.writeOff
	}
	if w.writeOff >= w.opts.SegmentSize {
		return w.rotateLocked()
	}
	return nil
}

// rotateLocked closes the full tail segment and starts the next one.
func (w *WAL) rotateLocked() error {
	if err := truncateAndSync(w.tail, w.writeOff); err != nil {
		return fmt.Errorf("wal: finish segment %s: %w", w.tail.Name(), err)
	}
	if err := w.tail.Close(); err != nil {
		return fmt.Errorf("wal: close segment %s: %w", w.tail.Name(), err)
	}
	prev := w.segments[len(w.segments)-1]
	return w.startSegment(prev.seq+1, w.lastIndex+1)
}

// startSegment creates segment seq with its preamble, under a temporary name until it is durable.
func (w *WAL) startSegment(seq, firstIndex uint64) error {
	final := filepath.Join(w.dir, segmentName(seq, firstIndex))
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("wal: create segment %s: %w", tmp, err)
	}
	preamble := appendRecord(nil, recordMetadata, w.metadata)
	if w.snapshot.GetMetadata().GetIndex() > 0 {
		payload, err := encodeSnapshot(w.snapshot, false)
		if err != nil {
			f.Close()
			return err
		}
		preamble = appendRecord(preamble, recordSnapshot, payload)
	}
	if hs := w.hardState; hs.GetTerm() != 0 || hs.GetVote() != 0 || hs.GetCommit() != 0 {
		preamble = appendRecord(preamble, recordHardState, encodeHardState(hs))
	}
	if err := writeAndSync(f, preamble); err != nil {
		f.Close()
		return fmt.Errorf("wal: write preamble of %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		f.Close()
		return fmt.Errorf("wal: rename %s: %w", tmp, err)
	}
	if err := datadir.SyncDir(w.dir); err != nil {
		f.Close()
		return err
	}
	w.segments = append(w.segments, segment{seq: seq, firstIndex: firstIndex, path: final})
	w.tail, w.writeOff, w.syncedOff = f, int64(len(preamble)), int64(len(preamble))
	w.preallocate()
	return nil
}

func writeAndSync(f *os.File, b []byte) error {
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Sync()
}

// ReleaseTo removes the segments whose entries all have index <= index and lie below FirstReadable. The caller
// must have saved a snapshot at or above index first.
func (w *WAL) ReleaseTo(index uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if index > w.snapshot.GetMetadata().GetIndex() {
		return fmt.Errorf("wal: release to %d above the saved snapshot at %d", index,
			w.snapshot.GetMetadata().GetIndex())
	}
	index = min(index, w.index.first-1)
	removed := 0
	for removed < len(w.segments)-1 && w.segments[removed+1].firstIndex-1 <= index {
		if err := os.Remove(w.segments[removed].path); err != nil {
			return fmt.Errorf("wal: remove %s: %w", w.segments[removed].path, err)
		}
		w.opts.Logger.Info("wal: removed segment", "file", w.segments[removed].path, "released-index", index)
		removed++
	}
	if removed == 0 {
		return nil
	}
	w.segments = w.segments[removed:]
	return datadir.SyncDir(w.dir)
}

// Segments returns the paths of the WAL's segment files, oldest first.
func (w *WAL) Segments() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	paths := make([]string, len(w.segments))
	for i, s := range w.segments {
		paths[i] = s.path
	}
	return paths
}

// Close syncs and closes the WAL.
func (w *WAL) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	err := unix.Fdatasync(int(w.tail.Fd()))
	return errors.Join(err, w.tail.Close())
}

// Crash closes the WAL the way a power cut would: bytes written since the last sync are lost. It exists
// for crash tests.
func (w *WAL) Crash() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	zeros := bytes.Repeat([]byte{0}, int(w.writeOff-w.syncedOff))
	_, _ = w.tail.WriteAt(zeros, w.syncedOff)
	_ = w.tail.Close()
}

// Tail returns the tail segment and the offset where the next record goes (for tools and crash tests).
func (w *WAL) Tail() (path string, offset int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.segments[len(w.segments)-1].path, w.writeOff
}
