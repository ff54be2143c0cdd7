package watchhub

import "testing"

// TestWindowGrowsAndEvicts: the ring starts small and doubles as revisions come, up to maxRevs, then evicts the
// oldest; every revision it holds reads back as itself, through growth after the ring has wrapped too.
func TestWindowGrowsAndEvicts(t *testing.T) {
	for _, tc := range []struct {
		name             string
		maxRevs, appends int
		wantFirst        int64
		wantRing         int
	}{
		{"within the first ring", 1000, 10, 1, initialWindowRing},
		{"grown twice", 1000, 3*initialWindowRing + 1, 1, 4 * initialWindowRing},
		{"full: evicts the oldest", 100, 250, 151, 100},
		{"maxRevs below the first ring", 10, 25, 16, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWindow(0, tc.maxRevs, 1<<30)
			for rev := int64(1); rev <= int64(tc.appends); rev++ {
				if err := w.append(revisionEvents{rev: rev, bytes: 1}); err != nil {
					t.Fatal(err)
				}
				if rev == 40 && tc.maxRevs == 1000 {
					w.evictOldest() // the ring's start moves, so the next growth copies a wrapped ring
				}
			}
			if w.head != int64(tc.appends) || w.first() < tc.wantFirst || len(w.ring) != tc.wantRing {
				t.Fatalf("head %d, first %d, ring %d; want %d, %d, %d", w.head, w.first(), len(w.ring), tc.appends,
					tc.wantFirst, tc.wantRing)
			}
			for rev := w.first(); rev <= w.head; rev++ {
				if got, ok := w.at(rev); !ok || got.rev != rev {
					t.Fatalf("at(%d) = %+v, %v", rev, got, ok)
				}
			}
			if _, ok := w.at(w.first() - 1); ok && w.first() > 1 {
				t.Fatalf("at(%d), below the window, found a revision", w.first()-1)
			}
			if w.bytes != w.count {
				t.Fatalf("bytes %d for %d revisions of 1 byte", w.bytes, w.count)
			}
		})
	}
}
