package mvcc

import (
	"fmt"
	"testing"
)

// BenchmarkKeyIndexGet measures a lookup in an index of 10,000 keys, as every put, delete and read makes:
// it should allocate nothing.
//
//	go test -run '^$' -bench KeyIndexGet -benchmem ./services/storage/mvcc/
func BenchmarkKeyIndexGet(b *testing.B) {
	ix := newKeyIndex()
	for i := range 10000 {
		ix.put(fmt.Appendf(nil, "key-%05d", i), revision{main: int64(i + 1)}, 0)
	}
	key := []byte("key-04242")
	b.ReportAllocs()
	for b.Loop() {
		if ix.get(key) == nil {
			b.Fatal("key not found")
		}
	}
}

// TestKeyIndexGetFindsWhatWasPut checks lookups with the pooled probe: present keys, absent ones, and that a
// probe keeps no key once returned.
func TestKeyIndexGetFindsWhatWasPut(t *testing.T) {
	ix := newKeyIndex()
	ix.put([]byte("a"), revision{main: 1}, 0)
	ix.put([]byte("c"), revision{main: 2}, 0)
	for _, tc := range []struct {
		key   string
		found bool
	}{{"a", true}, {"b", false}, {"c", true}, {"", false}} {
		h := ix.get([]byte(tc.key))
		if (h != nil) != tc.found || (h != nil && string(h.key) != tc.key) {
			t.Fatalf("get(%q) = %v, want found %v", tc.key, h, tc.found)
		}
	}
	if probe, _ := ix.probes.Get().(*keyHistory); probe != nil && probe.key != nil {
		t.Fatalf("a pooled probe kept the key %q", probe.key)
	}
}

// TestReusePendingKeepsOnlySmallBuffers checks that a commit keeps the pending buffer of a batch up to
// keptPending entries, emptied and holding no write's bytes, and drops a larger one.
func TestReusePendingKeepsOnlySmallBuffers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int
		keeps bool
	}{{"small batch", 16, true}, {"at the bound", keptPending, true}, {"large batch", keptPending + 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			pending := make([]pendingKV, tc.size)
			for i := range pending {
				pending[i] = pendingKV{rev: revision{main: int64(i)}, key: []byte("k"), value: []byte("v")}
			}
			got := reusePending(pending)
			if len(got) != 0 || (cap(got) == tc.size) != tc.keeps {
				t.Fatalf("reusePending: len %d cap %d; want empty, buffer kept %v", len(got), cap(got), tc.keeps)
			}
			if tc.keeps && (pending[0].value != nil || pending[tc.size-1].key != nil) {
				t.Fatal("the kept buffer still holds a write's bytes")
			}
		})
	}
}
