package commitlogtest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"

	"github.com/cairn-kv/cairn/internal/commitlog"
)

// Config configures a Log.
type Config struct {
	// MemberID is reported by Status as member and leader.
	MemberID uint64
	// Path, when set, is the file the log is kept in.
	Path string
}

// Log is an in-process commitlog.Log.
type Log struct {
	cfg Config

	mu         sync.Mutex
	entries    []commitlog.Entry // entries[i].Index == firstIndex+i
	firstIndex uint64
	reported   uint64 // last index storage reported through Compact
	changed    chan struct{}
	file       *os.File
	proposeErr error
	snapMember uint64
	snapURL    string
}

var _ commitlog.Log = (*Log)(nil)

// ErrClosed is returned after Close.
var ErrClosed = errors.New("memlog: closed")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Open creates the log, replaying cfg.Path if it exists.
func Open(cfg Config) (*Log, error) {
	l := &Log{cfg: cfg, firstIndex: 1, changed: make(chan struct{})}
	if cfg.Path == "" {
		return l, nil
	}
	f, err := os.OpenFile(cfg.Path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open memlog %s: %w", cfg.Path, err)
	}
	good, err := l.replay(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := f.Truncate(good); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("truncate torn tail of %s at offset %d: %w", cfg.Path, good, err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("seek %s to %d: %w", cfg.Path, good, err)
	}
	l.file = f
	return l, nil
}

// record layout: length of the rest (4), CRC-32C of the rest (4), index (8), kind (1), data.
const headerLen = 8

func (l *Log) replay(f *os.File) (int64, error) {
	r := bufio.NewReader(f)
	var offset int64
	for {
		var hdr [headerLen]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return offset, nil // end of file, or a torn header
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		if n < 9 || n > 64<<20 {
			return offset, nil
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil || crc32.Checksum(body, crcTable) != binary.BigEndian.Uint32(hdr[4:]) {
			return offset, nil
		}
		index := binary.BigEndian.Uint64(body)
		if want := l.lastIndexLocked() + 1; index != want {
			return 0, fmt.Errorf("memlog %s: record at offset %d has index %d, want %d", l.cfg.Path, offset, index, want)
		}
		l.entries = append(l.entries, commitlog.Entry{Index: index, Term: 1, Kind: commitlog.Kind(body[8]), Data: body[9:]})
		offset += headerLen + int64(n)
	}
}

func (l *Log) lastIndexLocked() uint64 { return l.firstIndex + uint64(len(l.entries)) - 1 }

// Propose commits data as the next entry.
func (l *Log) Propose(ctx context.Context, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := l.Append(commitlog.KindNormal, data)
	return err
}

// Append commits an entry of any kind but KindSnapshot (tests use it for empty and conf-change entries) and
// returns its index.
func (l *Log) Append(kind commitlog.Kind, data []byte) (uint64, error) {
	if kind == commitlog.KindSnapshot {
		return 0, fmt.Errorf("memlog: cannot append a snapshot entry")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.proposeErr != nil {
		return 0, l.proposeErr
	}
	e := commitlog.Entry{Index: l.lastIndexLocked() + 1, Term: 1, Kind: kind, Data: append([]byte(nil), data...)}
	if l.file != nil {
		if err := l.writeRecord(e); err != nil {
			return 0, err
		}
	}
	l.entries = append(l.entries, e)
	close(l.changed)
	l.changed = make(chan struct{})
	return e.Index, nil
}

func (l *Log) writeRecord(e commitlog.Entry) error {
	body := make([]byte, 9+len(e.Data))
	binary.BigEndian.PutUint64(body, e.Index)
	body[8] = byte(e.Kind)
	copy(body[9:], e.Data)
	rec := make([]byte, headerLen, headerLen+len(body))
	binary.BigEndian.PutUint32(rec, uint32(len(body)))
	binary.BigEndian.PutUint32(rec[4:], crc32.Checksum(body, crcTable))
	rec = append(rec, body...)
	if _, err := l.file.Write(rec); err != nil {
		return fmt.Errorf("append index %d to %s: %w", e.Index, l.cfg.Path, err)
	}
	if err := l.file.Sync(); err != nil {
		return fmt.Errorf("fsync %s at index %d: %w", l.cfg.Path, e.Index, err)
	}
	return nil
}

// Committed delivers entries from fromIndex on, in batches, until ctx ends or deliver fails.
func (l *Log) Committed(ctx context.Context, fromIndex uint64, deliver func([]commitlog.Entry) error) error {
	next := max(fromIndex, 1)
	for {
		batch, changed := l.next(next)
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-changed:
				continue
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := deliver(batch); err != nil {
			return err
		}
		next = batch[len(batch)-1].Index + 1
	}
}

const maxBatch = 256

// next returns the entries from index on (or the snapshot standing for them), and a channel closed on change.
func (l *Log) next(index uint64) ([]commitlog.Entry, chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if index < l.firstIndex {
		snap := l.firstIndex - 1
		return []commitlog.Entry{{Index: snap, Term: 1, Kind: commitlog.KindSnapshot, Snapshot: &commitlog.SnapshotRef{
			Index: snap, Term: 1, SourceMemberID: l.snapMember, SourceStorageURL: l.snapURL}}}, l.changed
	}
	from := index - l.firstIndex
	if from >= uint64(len(l.entries)) {
		return nil, l.changed
	}
	end := min(uint64(len(l.entries)), from+maxBatch)
	return append([]commitlog.Entry(nil), l.entries[from:end]...), l.changed
}

// ReadIndex returns the last committed index: with one member every appended entry is committed.
func (l *Log) ReadIndex(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.proposeErr != nil {
		return 0, l.proposeErr
	}
	return l.lastIndexLocked(), nil
}

// Compact records that storage durably applied everything up to appliedIndex. Nothing is discarded until
// DiscardThrough is called.
func (l *Log) Compact(_ context.Context, appliedIndex uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if appliedIndex > l.lastIndexLocked() {
		return fmt.Errorf("memlog: compact at %d beyond last index %d", appliedIndex, l.lastIndexLocked())
	}
	l.reported = max(l.reported, appliedIndex)
	return nil
}

// Reported is the highest index storage reported through Compact.
func (l *Log) Reported() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reported
}

// DiscardThrough drops the entries up to index from memory (never above the reported index), so readers from
// below it get a KindSnapshot.
func (l *Log) DiscardThrough(index uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if index > l.reported {
		return fmt.Errorf("memlog: discard through %d above reported index %d", index, l.reported)
	}
	if index < l.firstIndex {
		return nil
	}
	l.entries = append([]commitlog.Entry(nil), l.entries[index-l.firstIndex+1:]...)
	l.firstIndex = index + 1
	return nil
}

// SetSnapshotSource names the storage that KindSnapshot entries point at.
func (l *Log) SetSnapshotSource(memberID uint64, storageURL string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.snapMember, l.snapURL = memberID, storageURL
}

// SetProposeError makes Propose and ReadIndex fail with err (nil restores them).
func (l *Log) SetProposeError(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.proposeErr = err
}

// Status reports this single member as leader of term 1.
func (l *Log) Status(context.Context) (commitlog.Status, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.lastIndexLocked()
	leader := l.cfg.MemberID
	if l.proposeErr != nil {
		leader = 0
	}
	return commitlog.Status{MemberID: l.cfg.MemberID, Term: 1, Leader: leader, CommitIndex: last, AppliedIndex: last,
		Members: []commitlog.Member{{ID: l.cfg.MemberID, StorageURL: l.snapURL}}}, nil
}

// Close closes the file, if any.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == nil {
		return nil
	}
	err := l.file.Close()
	l.file = nil
	l.proposeErr = ErrClosed
	return err
}
