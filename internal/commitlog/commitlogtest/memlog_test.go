package commitlogtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/commitlog"
)

// collect reads entries from index from until n have arrived.
func collect(t *testing.T, l *Log, from uint64, n int) []commitlog.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []commitlog.Entry
	errEnough := errors.New("enough")
	err := l.Committed(ctx, from, func(batch []commitlog.Entry) error {
		got = append(got, batch...)
		if len(got) >= n {
			return errEnough
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		t.Fatalf("Committed from %d: %v after %d entries", from, err, len(got))
	}
	return got
}

func TestCommittedDeliversInOrderFromAnyIndex(t *testing.T) {
	l, _ := Open(Config{MemberID: 1})
	for i := range 600 {
		if err := l.Propose(context.Background(), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		from uint64
		n    int
	}{{0, 600}, {1, 600}, {300, 301}, {600, 1}}
	for _, tc := range tests {
		got := collect(t, l, tc.from, tc.n)
		for i, e := range got {
			want := max(tc.from, 1) + uint64(i)
			if e.Index != want || string(e.Data) != fmt.Sprint(want-1) || e.Kind != commitlog.KindNormal {
				t.Fatalf("from %d: entry %d = %+v, want index %d", tc.from, i, e, want)
			}
		}
	}
	if idx, _ := l.ReadIndex(context.Background()); idx != 600 {
		t.Fatalf("ReadIndex %d, want 600", idx)
	}
}

func TestCommittedWaitsForNewEntries(t *testing.T) {
	l, _ := Open(Config{MemberID: 1})
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = l.Propose(context.Background(), []byte("late"))
	}()
	if got := collect(t, l, 1, 1); string(got[0].Data) != "late" {
		t.Fatalf("got %+v", got)
	}
}

func TestDiscardGivesSnapshot(t *testing.T) {
	l, _ := Open(Config{MemberID: 1})
	for range 10 {
		_ = l.Propose(context.Background(), []byte("x"))
	}
	if err := l.DiscardThrough(5); err == nil {
		t.Fatal("discard above the reported index allowed")
	}
	if err := l.Compact(context.Background(), 11); err == nil {
		t.Fatal("compact beyond the last index allowed")
	}
	_ = l.Compact(context.Background(), 6)
	if err := l.DiscardThrough(6); err != nil {
		t.Fatal(err)
	}
	l.SetSnapshotSource(9, "http://127.0.0.1:1")
	got := collect(t, l, 2, 5)
	snap := got[0]
	if snap.Kind != commitlog.KindSnapshot || snap.Index != 6 || snap.Snapshot.SourceMemberID != 9 || got[1].Index != 7 {
		t.Fatalf("entries from a discarded index: %+v", got)
	}
	if got := collect(t, l, 7, 4); got[0].Index != 7 {
		t.Fatalf("entries from a kept index: %+v", got)
	}
}

func TestProposeError(t *testing.T) {
	l, _ := Open(Config{MemberID: 1})
	errNoLeader := errors.New("no leader")
	l.SetProposeError(errNoLeader)
	if err := l.Propose(context.Background(), nil); !errors.Is(err, errNoLeader) {
		t.Fatalf("Propose: %v", err)
	}
	if st, _ := l.Status(context.Background()); st.Leader != 0 {
		t.Fatalf("leader %d with propose error", st.Leader)
	}
}

func TestFileBackedReplayDropsTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, err := Open(Config{MemberID: 1, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		_ = l.Propose(context.Background(), []byte(fmt.Sprint(i)))
	}
	_, _ = l.Append(commitlog.KindEmpty, nil)
	_ = l.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.Write([]byte{0, 0, 0, 40, 1, 2}) // a torn record
	_ = f.Close()
	l, err = Open(Config{MemberID: 1, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, l, 1, 6)
	if got[4].Index != 5 || string(got[4].Data) != "4" || got[5].Kind != commitlog.KindEmpty {
		t.Fatalf("replayed %+v", got)
	}
	if err := l.Propose(context.Background(), []byte("next")); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, l, 7, 1); string(got[0].Data) != "next" {
		t.Fatalf("after torn tail: %+v", got)
	}
}
