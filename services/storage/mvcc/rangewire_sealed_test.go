package mvcc

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// testOpener stands for a keyring (Config.Opener): a sealed value is "S" + the plain value reversed + "!!", so it
// is longer than its plain value; a value without the S is plain; a key starting with "refused" fails to open.
type testOpener struct{}

var errTestRefused = errors.New("test opener: refused")

func testSealed(plain string) string {
	reversed := []byte(plain)
	slices.Reverse(reversed)
	return "S" + string(reversed) + "!!"
}

func (testOpener) OpenedLen(_, stored []byte) (int, error) {
	if !bytes.HasPrefix(stored, []byte("S")) {
		return len(stored), nil
	}
	if len(stored) < 3 {
		return 0, fmt.Errorf("test opener: %q is too short", stored)
	}
	return len(stored) - 3, nil
}

func (o testOpener) AppendOpen(dst, key, stored []byte) ([]byte, error) {
	if strings.HasPrefix(string(key), "refused") {
		return nil, fmt.Errorf("open %q: %w", key, errTestRefused)
	}
	if !bytes.HasPrefix(stored, []byte("S")) {
		return append(dst, stored...), nil
	}
	n, err := o.OpenedLen(key, stored)
	if err != nil {
		return nil, err
	}
	for i := range n {
		dst = append(dst, stored[n-i])
	}
	return dst, nil
}

// TestRangeEncodedSealed: in a store of sealed values, the encoded range (each value opened into the answer) is
// Range's answer (values decoded, then opened) for every kind of range, over committed and pending revisions,
// with empty, plain and large values, and fails as Range fails on a value that does not open.
func TestRangeEncodedSealed(t *testing.T) {
	t.Parallel()
	ts := openTestStore(t, Config{Opener: testOpener{}})
	for i := range 20 {
		ts.apply(put(fmt.Sprintf("k%02d", i), testSealed(fmt.Sprintf("committed-%d", i))))
	}
	ts.apply(put("k-empty", ""))
	ts.apply(put("k-plain", "plain"))
	ts.apply(put("k-large", testSealed(strings.Repeat("large ", 20<<10)), withLease(0)))
	if err := ts.Commit(); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 30; i++ { // pending: k10..k19 again, k20..k29 new
		ts.apply(put(fmt.Sprintf("k%02d", i), testSealed(fmt.Sprintf("pending-%d", i))))
	}
	ts.apply(put("k-sealed-empty", testSealed("")))
	ts.apply(put("refused", testSealed("secret")))
	tests := []*pb.RangeRequest{
		{Key: []byte("k03")},
		{Key: []byte("k15")},
		{Key: []byte("k-empty")},
		{Key: []byte("k-plain")},
		{Key: []byte("k-large")},
		{Key: []byte("k-sealed-empty")},
		{Key: []byte("nothing")},
		{Key: []byte("k"), RangeEnd: []byte("l")},
		{Key: []byte("k"), RangeEnd: []byte("l"), Limit: 7},
		{Key: []byte("k"), RangeEnd: []byte("l"), Revision: 15},
		{Key: []byte("k"), RangeEnd: []byte("l"), SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_VALUE, Limit: 3},
		{Key: []byte("k"), RangeEnd: []byte("l"), KeysOnly: true},
		{Key: []byte("refused")},
		{Key: []byte{0}, RangeEnd: []byte{0}},
	}
	for _, r := range tests {
		want, wantErr := ts.Range(r)
		if string(r.Key) == "refused" || len(r.RangeEnd) > 0 && r.Key[0] == 0 {
			if !errors.Is(wantErr, errTestRefused) {
				t.Fatalf("Range %v: error %v, want %v", r, wantErr, errTestRefused)
			}
		} else if wantErr != nil {
			t.Fatalf("Range %v: %v", r, wantErr)
		}
		if string(r.Key) == "k-large" && string(want.Kvs[0].Value) != strings.Repeat("large ", 20<<10) {
			t.Fatalf("Range %v: value of %d bytes is not the plain value", r, len(want.Kvs[0].Value))
		}
		checkRangeEncoded(t, ts, r, want, wantErr)
	}
}

// TestRangeEncodedSealedCopiesOnce: the encoded answer of a large sealed value is the only buffer of that size a
// range allocates (the value is opened into it): no decoded copy of the stored value, no separate plain value.
func TestRangeEncodedSealedCopiesOnce(t *testing.T) { // not parallel: it counts the bytes the process allocates
	const size = 256 << 10
	ts := openTestStore(t, Config{Opener: testOpener{}})
	ts.apply(put("big", testSealed(strings.Repeat("v", size))))
	if err := ts.Commit(); err != nil {
		t.Fatal(err)
	}
	answer := make([]byte, 0, 2*size)
	r := &pb.RangeRequest{Key: []byte("big")}
	const runs = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		if _, err := ts.RangeEncoded(r, 1, func(int) []byte { return answer[:0] }); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if perRange := (after.TotalAlloc - before.TotalAlloc) / runs; perRange > size/4 {
		t.Fatalf("a range of one %d KiB sealed value allocated %d bytes besides its answer; want under %d", size>>10,
			perRange, size/4)
	}
}
