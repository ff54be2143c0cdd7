package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ErrCorrupt is wrapped by every error about a WAL that cannot be trusted; the message names the file and
// the byte offset of the first bad record.
var ErrCorrupt = errors.New("wal: corrupt")

const segmentSuffix = ".wal"

// segment is one file of the WAL.
type segment struct {
	seq        uint64
	firstIndex uint64
	path       string
}

func segmentName(seq, firstIndex uint64) string {
	return fmt.Sprintf("%016x-%016x%s", seq, firstIndex, segmentSuffix)
}

func parseSegmentName(name string) (seq, firstIndex uint64, ok bool) {
	if !strings.HasSuffix(name, segmentSuffix) {
		return 0, 0, false
	}
	var s, f uint64
	if _, err := fmt.Sscanf(strings.TrimSuffix(name, segmentSuffix), "%016x-%016x", &s, &f); err != nil {
		return 0, 0, false
	}
	return s, f, segmentName(s, f) == name
}

// listSegments returns the directory's segments in seq order; seqs must be contiguous.
func listSegments(dir string) ([]segment, error) {
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	var segs []segment
	for _, de := range names {
		seq, first, ok := parseSegmentName(de.Name())
		if !ok {
			continue
		}
		segs = append(segs, segment{seq: seq, firstIndex: first, path: filepath.Join(dir, de.Name())})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].seq < segs[j].seq })
	for i := 1; i < len(segs); i++ {
		if segs[i].seq != segs[i-1].seq+1 {
			return nil, fmt.Errorf("%w: segment %s follows %s: a segment is missing", ErrCorrupt,
				filepath.Base(segs[i].path), filepath.Base(segs[i-1].path))
		}
	}
	return segs, nil
}

// scanResult is what scanning one segment found.
type scanResult struct {
	records []record
	// validSize is the offset just after the last valid record.
	validSize int
	// torn says the bytes after validSize were a torn write (not just preallocated zeros).
	torn bool
}

// scanSegment decodes every record of a segment's bytes. In the last segment a broken tail is reported as
// torn; anywhere else, and before a valid record, a broken record is corruption.
func scanSegment(path string, data []byte, last bool) (scanResult, error) {
	var res scanResult
	off := 0
	for off < len(data) {
		rec, next, err := decodeRecord(data, off)
		if err == nil {
			rec.off = off
			res.records = append(res.records, rec)
			off = next
			continue
		}
		res.validSize = off
		if allZero(data[off:]) {
			return res, nil
		}
		if last && !validRecordAfter(data, off+1) {
			res.torn = true
			return res, nil
		}
		return res, fmt.Errorf("%w: broken record in %s at offset %d", ErrCorrupt, path, off)
	}
	res.validSize = off
	return res, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// validRecordAfter reports whether any offset from from on holds a valid record. It is only called on the
// error path, so a byte-by-byte search is affordable.
func validRecordAfter(data []byte, from int) bool {
	lastNonZero := len(data) - 1
	for lastNonZero >= from && data[lastNonZero] == 0 {
		lastNonZero--
	}
	for p := from; p <= lastNonZero; p++ {
		if _, _, err := decodeRecord(data, p); err == nil {
			return true
		}
	}
	return false
}
