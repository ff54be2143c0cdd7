package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

func entry(index, term uint64, data string) *raftpb.Entry {
	return &raftpb.Entry{Index: new(index), Term: new(term), Type: raftpb.EntryNormal.Enum(), Data: []byte(data)}
}

func entries(from, to, term uint64) []*raftpb.Entry {
	var ents []*raftpb.Entry
	for i := from; i <= to; i++ {
		ents = append(ents, entry(i, term, fmt.Sprintf("entry-%d-term-%d", i, term)))
	}
	return ents
}

func hardState(term, vote, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

func snapshotAt(index, term uint64) *raftpb.Snapshot {
	return &raftpb.Snapshot{Data: []byte("ref"), Metadata: &raftpb.SnapshotMetadata{
		Index: new(index), Term: new(term), ConfState: raftpb.EnsureConfState(&raftpb.ConfState{Voters: []uint64{1}}),
	}}
}

// describe renders entries as "index/term" for comparison.
func describe(ents []*raftpb.Entry) string {
	var parts []string
	for _, e := range ents {
		parts = append(parts, fmt.Sprintf("%d/%d:%s", e.GetIndex(), e.GetTerm(), e.GetData()))
	}
	return strings.Join(parts, " ")
}

func mustCreate(t *testing.T, dir string, opts Options) *WAL {
	t.Helper()
	w, err := Create(dir, []byte("meta"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func mustOpen(t *testing.T, dir string, opts Options) (*WAL, *State) {
	t.Helper()
	w, st, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w, st
}

func TestReplay(t *testing.T) {
	t.Parallel()
	type save struct {
		snap    *raftpb.Snapshot // received from a leader
		ownSnap *raftpb.Snapshot // taken locally (SaveSnapshot)
		hs      *raftpb.HardState
		ents    []*raftpb.Entry
	}
	tests := []struct {
		name      string
		saves     []save
		wantEnts  string
		wantHS    string
		wantSnap  uint64
		wantError string
	}{
		{
			name:     "entries and hard state",
			saves:    []save{{hs: hardState(1, 1, 2), ents: entries(1, 3, 1)}},
			wantEnts: describe(entries(1, 3, 1)), wantHS: "1/1/2",
		},
		{
			name: "a later entry replaces the log from its index",
			saves: []save{
				{hs: hardState(1, 1, 4), ents: entries(1, 10, 1)},
				{hs: hardState(2, 2, 4), ents: entries(6, 8, 2)},
			},
			wantEnts: describe(append(entries(1, 5, 1), entries(6, 8, 2)...)), wantHS: "2/2/4",
		},
		{
			name: "a received snapshot replaces the whole log",
			saves: []save{
				{hs: hardState(1, 1, 5), ents: entries(1, 10, 1)},
				{snap: snapshotAt(20, 2), hs: hardState(2, 0, 20), ents: entries(21, 22, 2)},
			},
			wantEnts: describe(entries(21, 22, 2)), wantHS: "2/0/20", wantSnap: 20,
		},
		{
			name: "an own snapshot keeps the entries after it",
			saves: []save{
				{hs: hardState(1, 1, 8), ents: entries(1, 10, 1)},
				{ownSnap: snapshotAt(6, 1)},
			},
			wantEnts: describe(entries(7, 10, 1)), wantHS: "1/1/8", wantSnap: 6,
		},
		{
			name: "a snapshot above the saved commit raises it and drops an older vote",
			saves: []save{
				{hs: hardState(1, 3, 2), ents: entries(1, 3, 1)},
				{snap: snapshotAt(9, 2)},
			},
			wantEnts: "", wantHS: "2/0/9", wantSnap: 9,
		},
		{
			name: "a gap in the entries is corruption",
			saves: []save{
				{ents: entries(1, 3, 1)},
				{ents: entries(5, 6, 1)},
			},
			wantError: "entries are missing",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			w := mustCreate(t, dir, Options{SegmentSize: 1 << 20})
			for _, s := range tc.saves {
				if s.ownSnap != nil {
					if err := w.SaveSnapshot(s.ownSnap); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := w.Save(s.snap, s.hs, s.ents, true); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w, st, err := Open(dir, Options{SegmentSize: 1 << 20})
			if tc.wantError != "" {
				if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("Open error = %v, want ErrCorrupt containing %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if got := describe(st.Entries); got != tc.wantEnts {
				t.Errorf("entries = %q, want %q", got, tc.wantEnts)
			}
			hs := st.HardState
			if got := fmt.Sprintf("%d/%d/%d", hs.GetTerm(), hs.GetVote(), hs.GetCommit()); got != tc.wantHS {
				t.Errorf("hard state = %s, want %s", got, tc.wantHS)
			}
			if got := st.Snapshot.GetMetadata().GetIndex(); got != tc.wantSnap {
				t.Errorf("snapshot index = %d, want %d", got, tc.wantSnap)
			}
			if string(st.Metadata) != "meta" {
				t.Errorf("metadata = %q", st.Metadata)
			}
		})
	}
}

// tornFixture writes a WAL whose last batch is three entries, and returns the tail segment and the offsets
// at which each of those records ends.
func tornFixture(t *testing.T, dir string) (path string, batchStart int64, recordEnds []int64) {
	t.Helper()
	w := mustCreate(t, dir, Options{SegmentSize: 1 << 16})
	if err := w.Save(nil, hardState(1, 1, 3), entries(1, 3, 1), true); err != nil {
		t.Fatal(err)
	}
	batchStart = w.writeOff
	off := batchStart
	for _, e := range entries(4, 6, 1) {
		off += int64(len(appendEntryRecord(nil, e)))
		recordEnds = append(recordEnds, off)
	}
	if err := w.Save(nil, nil, entries(4, 6, 1), true); err != nil {
		t.Fatal(err)
	}
	path = w.segments[len(w.segments)-1].path
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, batchStart, recordEnds
}

func TestTornTailOfEveryLength(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	path, batchStart, recordEnds := tornFixture(t, filepath.Join(base, "fixture"))
	pristine, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	damages := map[string]func(b []byte, at int64) []byte{
		"file cut off":      func(b []byte, at int64) []byte { return b[:at] },
		"tail never synced": func(b []byte, at int64) []byte { clear(b[at:]); return b },
	}
	for name, damage := range damages {
		for cut := batchStart; cut < recordEnds[len(recordEnds)-1]; cut++ {
			t.Run(fmt.Sprintf("%s at %d", name, cut), func(t *testing.T) {
				t.Parallel()
				dir := filepath.Join(base, fmt.Sprintf("%s-%d", strings.ReplaceAll(name, " ", "-"), cut))
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				damaged := damage(append([]byte(nil), pristine...), cut)
				if err := os.WriteFile(filepath.Join(dir, filepath.Base(path)), damaged, 0o600); err != nil {
					t.Fatal(err)
				}
				last := uint64(3)
				for i, end := range recordEnds {
					if end <= cut {
						last = 4 + uint64(i)
					}
				}
				w, st := mustOpen(t, dir, Options{SegmentSize: 1 << 16})
				if got, want := describe(st.Entries), describe(entries(1, last, 1)); got != want {
					t.Fatalf("entries = %q, want %q", got, want)
				}
				// The repaired WAL takes new entries and keeps them.
				if err := w.Save(nil, nil, entries(last+1, last+1, 2), true); err != nil {
					t.Fatal(err)
				}
				w.Close()
				w, st = mustOpen(t, dir, Options{SegmentSize: 1 << 16})
				defer w.Close()
				if got := st.Entries[len(st.Entries)-1]; got.GetIndex() != last+1 || got.GetTerm() != 2 {
					t.Fatalf("after repair, last entry = %d/%d, want %d/2", got.GetIndex(), got.GetTerm(), last+1)
				}
			})
		}
	}
}

func TestFlippedByte(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	path, batchStart, recordEnds := tornFixture(t, filepath.Join(base, "fixture"))
	pristine, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recordStart := func(at int64) int64 {
		start := batchStart
		for _, end := range recordEnds {
			if at < end {
				return start
			}
			start = end
		}
		return start
	}
	lastStart := recordEnds[len(recordEnds)-2]
	for at := batchStart; at < recordEnds[len(recordEnds)-1]; at++ {
		t.Run(fmt.Sprintf("byte %d", at), func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(base, fmt.Sprintf("flip-%d", at))
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			damaged := append([]byte(nil), pristine...)
			damaged[at] ^= 0x10
			file := filepath.Join(dir, filepath.Base(path))
			if err := os.WriteFile(file, damaged, 0o600); err != nil {
				t.Fatal(err)
			}
			w, st, err := Open(dir, Options{SegmentSize: 1 << 16})
			if at >= lastStart {
				// Nothing valid follows the last record: it is indistinguishable from a torn write.
				if err != nil {
					t.Fatalf("flip in the last record: Open = %v, want the record cut off", err)
				}
				defer w.Close()
				if got, want := describe(st.Entries), describe(entries(1, 5, 1)); got != want {
					t.Fatalf("entries = %q, want %q", got, want)
				}
				return
			}
			want := fmt.Sprintf("%s at offset %d", file, recordStart(at))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
				t.Fatalf("Open error = %v, want ErrCorrupt naming %q", err, want)
			}
		})
	}
}

func TestRotationAndRelease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := Options{SegmentSize: 4096}
	w := mustCreate(t, dir, opts)
	for i := uint64(1); i <= 500; i += 10 {
		if err := w.Save(nil, hardState(1, 1, i), entries(i, i+9, 1), true); err != nil {
			t.Fatal(err)
		}
	}
	segs := w.Segments()
	if len(segs) < 5 {
		t.Fatalf("%d segments after 500 entries of ~30 bytes in 4 KiB segments, want several", len(segs))
	}
	if err := w.ReleaseTo(300); err == nil {
		t.Fatal("ReleaseTo above the saved snapshot succeeded")
	}
	if err := w.SaveSnapshot(snapshotAt(300, 1)); err != nil {
		t.Fatal(err)
	}
	// Entries Entries can still read back keep their segments: nothing goes before Forget.
	if err := w.ReleaseTo(300); err != nil {
		t.Fatal(err)
	}
	if kept := w.Segments(); len(kept) != len(segs) {
		t.Fatalf("ReleaseTo(300) removed %d segments of readable entries", len(segs)-len(kept))
	}
	w.Forget(301)
	if err := w.ReleaseTo(300); err != nil {
		t.Fatal(err)
	}
	left := w.Segments()
	if len(left) >= len(segs) {
		t.Fatalf("ReleaseTo(300) removed nothing: %d segments", len(left))
	}
	// The first segment left must still hold entry 301 (its successor starts above it).
	_, firstOfSecond, _ := parseSegmentName(filepath.Base(left[1]))
	if firstOfSecond <= 301 {
		t.Fatalf("segment %s was kept though entries up to %d are released", left[0], firstOfSecond-1)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, st := mustOpen(t, dir, opts)
	defer w.Close()
	if got, want := describe(st.Entries), describe(entries(301, 500, 1)); got != want {
		t.Fatalf("after release, entries = %q, want %q", got, want)
	}
	if st.Snapshot.GetMetadata().GetIndex() != 300 || st.HardState.GetCommit() != 491 {
		t.Fatalf("snapshot %d, commit %d; want 300, 491", st.Snapshot.GetMetadata().GetIndex(), st.HardState.GetCommit())
	}
}

func TestCorruptOlderSegmentIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := mustCreate(t, dir, Options{SegmentSize: 4096})
	for i := uint64(1); i <= 300; i += 10 {
		if err := w.Save(nil, nil, entries(i, i+9, 1), true); err != nil {
			t.Fatal(err)
		}
	}
	first := w.Segments()[0]
	w.Close()
	data, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	end := len(data) - 3 // inside the segment's last record, which a torn write could not reach
	data[end] ^= 0xff
	if err := os.WriteFile(first, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(dir, Options{SegmentSize: 4096}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), first) {
		t.Fatalf("Open = %v, want ErrCorrupt naming %s", err, first)
	}
}

func TestMissingSegmentIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := mustCreate(t, dir, Options{SegmentSize: 4096})
	for i := uint64(1); i <= 300; i += 10 {
		if err := w.Save(nil, nil, entries(i, i+9, 1), true); err != nil {
			t.Fatal(err)
		}
	}
	segs := w.Segments()
	w.Close()
	if err := os.Remove(segs[1]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(dir, Options{SegmentSize: 4096}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a missing segment = %v, want ErrCorrupt", err)
	}
}

func TestCrashLosesOnlyUnsyncedWrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := mustCreate(t, dir, Options{})
	if err := w.Save(nil, hardState(1, 1, 2), entries(1, 2, 1), true); err != nil {
		t.Fatal(err)
	}
	if err := w.Save(nil, hardState(1, 1, 3), entries(3, 3, 1), false); err != nil {
		t.Fatal(err)
	}
	w.Crash()
	w, st := mustOpen(t, dir, Options{})
	defer w.Close()
	if got, want := describe(st.Entries), describe(entries(1, 2, 1)); got != want {
		t.Fatalf("entries after crash = %q, want the synced %q", got, want)
	}
}

func BenchmarkSave(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			w, err := Create(b.TempDir(), nil, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			data := make([]byte, 256)
			next := uint64(1)
			b.SetBytes(int64(batch * len(data)))
			for b.Loop() {
				ents := make([]*raftpb.Entry, batch)
				for i := range ents {
					ents[i] = &raftpb.Entry{Index: new(next), Term: new(uint64(1)), Data: data}
					next++
				}
				if err := w.Save(nil, hardState(1, 1, next-1), ents, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// bigEntries returns count entries from index from with values of size bytes, as 100 KiB puts propose.
func bigEntries(from uint64, count, size int) []*raftpb.Entry {
	data := make([]byte, size)
	ents := make([]*raftpb.Entry, count)
	for i := range ents {
		ents[i] = &raftpb.Entry{Index: new(from + uint64(i)), Term: new(uint64(1)), Data: data}
	}
	return ents
}

// TestAppendGrowsItsBufferOnce checks that a batch larger than any before costs one buffer allocation, not a
// regrowth (and copy) every few records nor an allocation per record, and that the records written read back.
func TestAppendGrowsItsBufferOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	for _, tc := range []struct {
		name        string
		count, size int
	}{
		{"64 entries of 100 KiB", 64, 100 << 10},
		{"1000 entries of 100 B", 1000, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w := mustCreate(t, dir, Options{})
			ents, hs := bigEntries(1, tc.count, tc.size), hardState(1, 1, 0)
			allocs := testing.AllocsPerRun(3, func() {
				w.buf = nil // as if every batch were the largest yet
				if err := w.Append(nil, hs, ents); err != nil {
					t.Fatal(err)
				}
			})
			if allocs > 3 { // the buffer, the hard state's payload and its record's type byte
				t.Errorf("Append of %d entries of %d bytes made %.0f allocations, want at most 3", tc.count, tc.size, allocs)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			_, st := mustOpen(t, dir, Options{})
			if got := len(st.Entries); got != tc.count {
				t.Fatalf("replayed %d entries, want %d", got, tc.count)
			}
			if got := len(st.Entries[tc.count-1].GetData()); got != tc.size {
				t.Fatalf("last entry replayed with %d bytes, want %d", got, tc.size)
			}
		})
	}
}

// TestAppendKeepsOnlyAnOrdinaryBuffer: the buffer of an ordinary batch is kept for the next, the tens of MiB a
// burst of large values needed are not.
func TestAppendKeepsOnlyAnOrdinaryBuffer(t *testing.T) {
	for _, tc := range []struct {
		name        string
		count, size int
		kept        bool
	}{
		{"100 entries of 1 KiB", 100, 1 << 10, true},
		{"64 entries of 100 KiB", 64, 100 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := mustCreate(t, t.TempDir(), Options{SegmentSize: 1 << 30})
			defer w.Close()
			if err := w.Append(nil, hardState(1, 1, 0), bigEntries(1, tc.count, tc.size)); err != nil {
				t.Fatal(err)
			}
			if kept := w.buf != nil; kept != tc.kept {
				t.Errorf("after %d entries of %d bytes the buffer (capacity %d) kept: %v, want %v",
					tc.count, tc.size, cap(w.buf), kept, tc.kept)
			}
		})
	}
}

// BenchmarkAppendLargestBatch appends 64 entries of 100 KiB into an empty buffer each time: the cost of a
// batch larger than any before (how a leader's batches grow under 1000 clients' 100 KiB puts).
func BenchmarkAppendLargestBatch(b *testing.B) {
	w, err := Create(b.TempDir(), nil, Options{SegmentSize: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	ents := bigEntries(1, 64, 100<<10)
	b.SetBytes(int64(64 * (100 << 10)))
	b.ReportAllocs()
	next := uint64(1)
	for b.Loop() {
		for _, e := range ents {
			e.Index = new(next)
			next++
		}
		w.buf = nil
		if err := w.Append(nil, hardState(1, 1, next-1), ents); err != nil {
			b.Fatal(err)
		}
	}
}
