package mvcc

import (
	"math/rand/v2"
	"sort"
	"testing"
)

// TestRevListBehavesLikeASlice: appends, prefix drops, searches and walks agree with a plain slice, across block
// boundaries and drops that leave one block, several, or none.
func TestRevListBehavesLikeASlice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		ops            int
		appendsPerDrop int
		maxDrop        int
	}{
		{"short history", 200, 5, 3},
		{"hot key", 20, 3 * revBlockLen, 2 * revBlockLen},
		{"drops inside one block", 300, 40, 30},
		{"drops everything", 30, 100, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, uint64(len(tt.name))))
			var list revList
			var model []keyVersion
			main := int64(0)
			for range tt.ops {
				for range rng.IntN(tt.appendsPerDrop + 1) {
					main++
					kv := keyVersion{rev: revision{main: main}, version: main, tombstone: rng.IntN(10) == 0}
					list.append(kv)
					model = append(model, kv)
				}
				drop := rng.IntN(tt.maxDrop + 1)
				list.dropBefore(drop)
				model = model[min(drop, len(model)):]
				checkRevList(t, &list, model)
			}
		})
	}
}

func checkRevList(t *testing.T, list *revList, model []keyVersion) {
	t.Helper()
	if list.len() != len(model) {
		t.Fatalf("len %d, want %d", list.len(), len(model))
	}
	for i, kv := range model {
		if got := list.at(i); got != kv {
			t.Fatalf("at(%d) = %+v, want %+v", i, got, kv)
		}
	}
	last, ok := list.last()
	if ok != (len(model) > 0) || ok && last != model[len(model)-1] {
		t.Fatalf("last = %+v %v, model has %d", last, ok, len(model))
	}
	var walked []keyVersion
	list.each(func(kv keyVersion) bool { walked = append(walked, kv); return true })
	if len(walked) != len(model) {
		t.Fatalf("each walked %d, want %d", len(walked), len(model))
	}
	if len(model) == 0 {
		return
	}
	for _, at := range []int64{model[0].rev.main - 1, model[0].rev.main, model[len(model)/2].rev.main, model[len(model)-1].rev.main + 1} {
		after := func(kv keyVersion) bool { return kv.rev.main > at }
		want := sort.Search(len(model), func(i int) bool { return after(model[i]) })
		if got := list.search(after); got != want {
			t.Fatalf("search(> %d) = %d, want %d", at, got, want)
		}
	}
}
