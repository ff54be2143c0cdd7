package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

const mib = 1 << 20

func TestLimitFor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		stats heapStats
		want  int64
	}{
		{"small heap keeps the limit", Config{Limit: 64 * mib, MinGCPercent: 100}, heapStats{live: 10 * mib, outsideHeap: 8 * mib}, 64 * mib},
		{"exactly at the floor keeps the limit", Config{Limit: 48 * mib, MinGCPercent: 100}, heapStats{live: 20 * mib, outsideHeap: 8 * mib}, 48 * mib},
		{"large heap raises it to twice the live heap", Config{Limit: 48 * mib, MinGCPercent: 100}, heapStats{live: 40 * mib, outsideHeap: 8 * mib}, 88 * mib},
		{"a smaller minimum leaves less", Config{Limit: 48 * mib, MinGCPercent: 25}, heapStats{live: 40 * mib, outsideHeap: 8 * mib}, 58 * mib},
		{"stacks count against the limit", Config{Limit: 32 * mib, MinGCPercent: 100}, heapStats{live: 10 * mib, outsideHeap: 20 * mib}, 40 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := limitFor(tc.cfg, tc.stats); got != tc.want {
				t.Errorf("limitFor = %d MiB, want %d MiB", got/mib, tc.want/mib)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"limit", Config{Limit: 1}, true},
		{"no limit", Config{}, false},
		{"negative limit", Config{Limit: -1}, false},
		{"negative minimum", Config{Limit: mib, MinGCPercent: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if (err == nil) != tc.ok {
				t.Errorf("New(%+v) error %v, want ok=%v", tc.cfg, err, tc.ok)
			}
		})
	}
}

// TestTunerFollowsLiveHeap runs a Tuner in this process: the runtime's limit is the configured one while the
// heap is small, rises when the live heap outgrows it, comes back when the heap shrinks, and Stop restores the
// limit the process had.
func TestTunerFollowsLiveHeap(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	const limit = 16 * mib
	tuner, err := New(Config{Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	tuner.Start()
	t.Cleanup(tuner.Stop)
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Fatalf("after Start the runtime's limit is %d MiB, want %d MiB", got/mib, limit/mib)
	}

	live := make([][]byte, 64) // 64 MiB held: twice that is far above the limit
	for i := range live {
		live[i] = make([]byte, mib)
	}
	waitLimit(t, "the limit to rise above twice the live heap", func(got int64) bool { return got >= 128*mib })
	runtime.KeepAlive(live)

	live = nil
	waitLimit(t, "the limit to come back down", func(got int64) bool { return got == limit })

	tuner.Stop()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("after Stop the runtime's limit is %d, want %d as before Start", got, before)
	}
	runtime.GC()
	runtime.GC() // a retune still armed runs after a collection and must leave the limit alone
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("collections after Stop changed the limit to %d, want %d", got, before)
	}
}

// waitLimit collects until the runtime's limit satisfies ok.
func waitLimit(t *testing.T, what string, ok func(int64) bool) {
	t.Helper()
	waittest.Until(t, 10*time.Second, 10*time.Millisecond, what, func() bool {
		runtime.GC()
		return ok(debug.SetMemoryLimit(-1))
	})
}
