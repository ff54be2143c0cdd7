package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
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

// TestPacedPercent: GOGC follows what the last cycle allocated, scaled to the window, in percent of the live
// heap, between MinPacePercent and the GOGC the process had at Start; MinGCPercent before the first
// collection, MinPacePercent after it (the start-up's cycle); nothing paced with a negative window or GOGC off.
func TestPacedPercent(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, tc := range []struct {
		name      string
		window    time.Duration
		atStart   int // GOGC at Start
		lastAt    time.Time
		retunes   int // before this one: 0 at Start, 1 at the first collection
		elapsed   time.Duration
		live      uint64
		allocs    uint64 // since the last retune
		want      int
		wantPaced bool
	}{
		{"at Start", 30 * time.Second, 400, time.Time{}, 0, 0, 0, 0, 100, true},
		{"first collection, after a busy start-up", 30 * time.Second, 400, start, 1, 200 * time.Millisecond, 4 * mib, 4 * mib, 25, true},
		{"idle for two minutes", 30 * time.Second, 400, start, 2, 2 * time.Minute, 4 * mib, 4 * mib, 25, true},
		{"slow: a window's allocations are half the live heap", 30 * time.Second, 400, start, 2, time.Minute, 4 * mib, 4 * mib, 50, true},
		{"slow: a window's allocations are twice the live heap", 30 * time.Second, 400, start, 2, time.Minute, 4 * mib, 16 * mib, 200, true},
		{"busy for a second", 30 * time.Second, 400, start, 2, time.Second, 4 * mib, 10 * mib, 400, true},
		{"no time elapsed", 30 * time.Second, 400, start, 2, 0, 4 * mib, mib, 400, true},
		{"no pacing", -1, 400, start, 2, time.Minute, 4 * mib, mib, 0, false},
		{"GOGC off", 30 * time.Second, -1, start, 2, time.Minute, 4 * mib, mib, 0, false},
		{"GOGC at the minimum", 30 * time.Second, 100, start, 2, time.Minute, 4 * mib, mib, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tuner := &Tuner{cfg: Config{MinGCPercent: 100, MinPacePercent: 25, AllocWindow: tc.window}, previousPercent: tc.atStart,
				lastAt: tc.lastAt, lastAllocs: 100 * mib, retunes: tc.retunes}
			got, paced := tuner.pacedPercent(heapStats{live: tc.live, allocated: 100*mib + tc.allocs}, tc.lastAt.Add(tc.elapsed))
			if got != tc.want || paced != tc.wantPaced {
				t.Errorf("pacedPercent = %d, %v; want %d, %v", got, paced, tc.want, tc.wantPaced)
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
		{"no limit", Config{}, true},
		{"negative limit", Config{Limit: -1}, false},
		{"negative minimum", Config{Limit: mib, MinGCPercent: -1}, false},
		{"negative paced minimum", Config{MinPacePercent: -1}, false},
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

// TestTunerPacesSlowAllocator runs a Tuner with no limit in this process at GOGC 400: while the process
// allocates little between collections GOGC comes down to MinPacePercent, while it allocates fast it goes back
// to 400, and Stop restores GOGC and leaves the limit alone.
func TestTunerPacesSlowAllocator(t *testing.T) {
	limitBefore := debug.SetMemoryLimit(-1)
	percentBefore := debug.SetGCPercent(400)
	defer debug.SetGCPercent(percentBefore)
	tuner, err := New(Config{AllocWindow: time.Millisecond}) // a window in which this test allocates little
	if err != nil {
		t.Fatal(err)
	}
	tuner.Start()
	t.Cleanup(tuner.Stop)
	waitPercent(t, tuner, "GOGC paced down to 25", DefaultMinPacePercent, nil)

	tuner.Stop()
	if got := gogc(); got != 400 {
		t.Errorf("after Stop GOGC is %d, want 400 as before Start", got)
	}
	if got := debug.SetMemoryLimit(-1); got != limitBefore || tuner.Applied() != 0 {
		t.Errorf("a Tuner with no limit set one: %d (applied %d), want %d", got, tuner.Applied(), limitBefore)
	}

	busy, err := New(Config{}) // the default window: allocating a MiB per 10 ms is far more than the live heap
	if err != nil {
		t.Fatal(err)
	}
	busy.Start()
	t.Cleanup(busy.Stop)
	waitPercent(t, busy, "GOGC back at 400 while the process allocates fast", 400, func() { sink = make([]byte, mib) })
}

var sink []byte

// waitPercent collects, after calling work when given, until the tuner's GOGC, and the runtime's, is want.
func waitPercent(t *testing.T, tuner *Tuner, what string, want int, work func()) {
	t.Helper()
	waittest.Until(t, 10*time.Second, 10*time.Millisecond, what, func() bool {
		if work != nil {
			work()
		}
		runtime.GC()
		return gogc() == want && tuner.Percent() == want
	})
}

// gogc reads the runtime's GOGC without setting it (debug.SetGCPercent would race with the tuner's).
func gogc() int {
	sample := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(sample)
	return int(sample[0].Value.Uint64())
}

// waitLimit collects until the runtime's limit satisfies ok.
func waitLimit(t *testing.T, what string, ok func(int64) bool) {
	t.Helper()
	waittest.Until(t, 10*time.Second, 10*time.Millisecond, what, func() bool {
		runtime.GC()
		return ok(debug.SetMemoryLimit(-1))
	})
}
