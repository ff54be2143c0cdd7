package wal

import (
	"errors"
	"os"
	"testing"
)

// readBack reads [lo, hi) back with no size bound, or fails the test.
func readBack(t *testing.T, w *WAL, lo, hi uint64) string {
	t.Helper()
	ents, err := w.Entries(lo, hi, 1<<30)
	if err != nil {
		t.Fatalf("Entries(%d, %d): %v", lo, hi, err)
	}
	return describe(ents)
}

// TestEntriesReadBack: what Entries and Term read back is the log as raft's rule leaves it, across segment
// rotations, a replaced suffix, Forget, a reopen and a snapshot received from a leader.
func TestEntriesReadBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := Options{SegmentSize: 2048}
	w := mustCreate(t, dir, opts)
	for i := uint64(1); i <= 200; i += 10 {
		if err := w.Save(nil, hardState(1, 1, i), entries(i, i+9, 1), i%20 == 1); err != nil {
			t.Fatal(err)
		}
	}
	// A new leader replaces 181..200 with entries of term 2.
	if err := w.Save(nil, hardState(2, 2, 180), entries(181, 190, 2), true); err != nil {
		t.Fatal(err)
	}
	if len(w.Segments()) < 3 {
		t.Fatalf("%d segments, want several", len(w.Segments()))
	}
	want := describe(append(entries(1, 180, 1), entries(181, 190, 2)...))
	if got := readBack(t, w, 1, 191); got != want {
		t.Fatalf("read back %q\nwant %q", got, want)
	}
	record := uint64(headerSize + entryHeaderSize + len("entry-5-term-1")) // maxSize counts whole records
	for _, tc := range []struct {
		name            string
		lo, hi, maxSize uint64
		want            string
	}{
		{"one entry whatever the size", 5, 100, 1, describe(entries(5, 5, 1))},
		{"size bound", 5, 100, 3*record + record/2, describe(entries(5, 7, 1))},
		{"hi past the end", 188, 500, 1 << 20, describe(entries(188, 190, 2))},
		{"across the replaced suffix", 179, 183, 1 << 20, describe(append(entries(179, 180, 1), entries(181, 182, 2)...))},
	} {
		ents, err := w.Entries(tc.lo, tc.hi, tc.maxSize)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := describe(ents); got != tc.want {
			t.Errorf("%s: Entries(%d, %d, %d) = %q, want %q", tc.name, tc.lo, tc.hi, tc.maxSize, got, tc.want)
		}
	}
	for _, tc := range []struct {
		i, want uint64
		ok      bool
	}{{0, 0, true}, {1, 1, true}, {180, 1, true}, {181, 2, true}, {190, 2, true}, {191, 0, false}} {
		got, err := w.Term(tc.i)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Term(%d) = %d, %v; want %d (readable: %v)", tc.i, got, err, tc.want, tc.ok)
		}
	}

	w.Forget(101)
	if first := w.FirstReadable(); first != 101 {
		t.Fatalf("FirstReadable after Forget(101) = %d", first)
	}
	if _, err := w.Entries(100, 105, 1<<20); !errors.Is(err, ErrNotReadable) {
		t.Fatalf("Entries below what Forget kept = %v, want ErrNotReadable", err)
	}
	if term, err := w.Term(100); err != nil || term != 1 {
		t.Fatalf("Term(100), the entry before the first readable = %d, %v; want 1", term, err)
	}
	if _, err := w.Term(99); !errors.Is(err, ErrNotReadable) {
		t.Fatalf("Term(99) = %v, want ErrNotReadable", err)
	}
	if got, want := readBack(t, w, 101, 111), describe(entries(101, 110, 1)); got != want {
		t.Fatalf("after Forget: %q, want %q", got, want)
	}

	// A reopened WAL locates what it replayed: everything after its snapshot.
	if err := w.SaveSnapshot(snapshotAt(50, 1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, _ = mustOpen(t, dir, opts)
	if first := w.FirstReadable(); first != 51 {
		t.Fatalf("FirstReadable after reopening with a snapshot at 50 = %d, want 51", first)
	}
	if got, want := readBack(t, w, 51, 191), describe(append(entries(51, 180, 1), entries(181, 190, 2)...)); got != want {
		t.Fatalf("after reopen: %q\nwant %q", got, want)
	}
	if err := w.Save(nil, nil, entries(191, 195, 2), true); err != nil {
		t.Fatal(err)
	}
	if got, want := readBack(t, w, 189, 196), describe(entries(189, 195, 2)); got != want {
		t.Fatalf("appended after reopen: %q, want %q", got, want)
	}

	// A snapshot from a leader replaces the log: nothing before it is readable.
	if err := w.Save(snapshotAt(400, 3), hardState(3, 1, 400), entries(401, 402, 3), true); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Entries(195, 196, 1<<20); !errors.Is(err, ErrNotReadable) {
		t.Fatalf("Entries before a received snapshot = %v, want ErrNotReadable", err)
	}
	if term, err := w.Term(400); err != nil || term != 3 {
		t.Fatalf("Term(400), the received snapshot's = %d, %v; want 3", term, err)
	}
	if got, want := readBack(t, w, 401, 403), describe(entries(401, 402, 3)); got != want {
		t.Fatalf("after a received snapshot: %q, want %q", got, want)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestEntriesReadBackRefusesACorruptRecord: a record that no longer holds the entry it held is an error
// wrapping ErrCorrupt, not a wrong entry.
func TestEntriesReadBackRefusesACorruptRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := mustCreate(t, dir, Options{NoPreallocate: true})
	defer w.Close()
	if err := w.Save(nil, hardState(1, 1, 3), entries(1, 3, 1), true); err != nil {
		t.Fatal(err)
	}
	path, end := w.Tail()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[end-1] ^= 0x55                          // a byte of the HardState record, after the entries: they still read back
	data[end-hardStateSize-headerSize-2] ^= 0x55 // a data byte of entry 3
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := readBack(t, w, 1, 3), describe(entries(1, 2, 1)); got != want {
		t.Fatalf("intact entries: %q, want %q", got, want)
	}
	if _, err := w.Entries(2, 4, 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Entries over a flipped byte = %v, want ErrCorrupt", err)
	}
}
