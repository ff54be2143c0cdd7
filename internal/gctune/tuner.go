package gctune

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMinGCPercent is the least headroom a Tuner leaves the heap: at 100 the heap may grow to twice its live
// size between collections (Go's default GOGC) whatever the limit, so the limit never makes the collector
// run more often than GOGC 100 would.
const DefaultMinGCPercent = 100

// DefaultMinPacePercent is the least GOGC pacing gives a process that allocates slowly: at 25 an idle process's
// heap goal is its live heap and a quarter (Go's minimum heap at GOGC 25 is 1 MiB, at 100 it is 4 MiB), and it
// collects once it has allocated a quarter of its live heap, or at Go's forced collection every two minutes.
// An idle `cairn up` held 139-140 MiB of PSS at 25 against 153-155 at 100, for CPU within the noise
// (scripts/idle-ab.sh, README).
const DefaultMinPacePercent = 25

// DefaultAllocWindow is the AllocWindow a zero Config gets: a process that allocates slowly collects about
// every 30 s at most (every two minutes, Go's forced collection, when its heap grows by less than a quarter
// in that time), while one under load keeps its GOGC (what it allocates in 30 s is many times its live heap).
const DefaultAllocWindow = 30 * time.Second

// Config is what a Tuner keeps the process to.
type Config struct {
	// Limit is the soft memory limit in bytes (all the memory the Go runtime maps, heap and stacks alike, as
	// GOMEMLIMIT counts it); 0 sets none, and the Tuner only paces the collector.
	Limit int64
	// MinGCPercent is the least heap growth, in percent of the live heap, the limit may leave: when the live
	// heap is too large for Limit the runtime's limit is raised to keep this much. 0 means
	// DefaultMinGCPercent.
	MinGCPercent int
	// AllocWindow paces a process that allocates slowly: after each collection its GOGC is set to what it
	// allocated in AllocWindow at the last cycle's rate, in percent of its live heap, between MinPacePercent
	// and the GOGC it had at Start. GOGC's minimum heap is 4 MiB times GOGC/100 (16 MiB at 400), which an idle
	// process otherwise fills over minutes and keeps. 0 means DefaultAllocWindow; a negative window paces
	// nothing.
	AllocWindow time.Duration
	// MinPacePercent is the least GOGC pacing sets, and the GOGC after the first collection, which ends the
	// start-up (0 means DefaultMinPacePercent). It is below MinGCPercent: a process that allocates slowly
	// collects rarely whatever its GOGC, so a small one costs little CPU and keeps its heap near its live size.
	// Until the first collection GOGC is MinGCPercent.
	MinPacePercent int
}

// Validate reports what makes the configuration unusable.
func (c Config) Validate() error {
	var errs []error
	if c.Limit < 0 {
		errs = append(errs, fmt.Errorf("gctune: negative memory limit %d bytes", c.Limit))
	}
	if c.MinGCPercent < 0 {
		errs = append(errs, fmt.Errorf("gctune: negative minimum GC percent %d", c.MinGCPercent))
	}
	if c.MinPacePercent < 0 {
		errs = append(errs, fmt.Errorf("gctune: negative minimum paced GC percent %d", c.MinPacePercent))
	}
	return errors.Join(errs...)
}

// Tuner sets the process's soft memory limit after every collection, Config.Limit or more when the live heap
// needs it, and its GOGC, lower while it allocates slowly (see the package comment). There is one per
// process: the runtime's limit and GOGC are the process's.
type Tuner struct {
	cfg Config
	now func() time.Time
	// mu orders retune against Stop, so that nothing is set after Stop restored what the process had.
	mu              sync.Mutex
	previous        int64 // the runtime's limit before Start, restored by Stop
	previousPercent int   // GOGC before Start, restored by Stop: the most pacing sets
	stopped         bool
	samples         []metrics.Sample
	// lastAllocs and lastAt are the bytes allocated since the process started and the time at the last
	// retune: a cycle's allocation rate is measured from them.
	lastAllocs uint64
	lastAt     time.Time
	retunes    int          // retunes since Start: the one at Start, then one after each collection
	applied    atomic.Int64 // the limit last set
	percent    atomic.Int64 // the GOGC last set
}

// the runtime/metrics names limitFor reads, in the order of the samples.
var sampleNames = [...]string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/gc/heap/allocs:bytes",
}

// New returns a Tuner for cfg; Start puts it to work.
func New(cfg Config) (*Tuner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MinGCPercent == 0 {
		cfg.MinGCPercent = DefaultMinGCPercent
	}
	if cfg.MinPacePercent == 0 {
		cfg.MinPacePercent = DefaultMinPacePercent
	}
	if cfg.AllocWindow == 0 {
		cfg.AllocWindow = DefaultAllocWindow
	}
	t := &Tuner{cfg: cfg, now: time.Now, samples: make([]metrics.Sample, len(sampleNames))}
	for i, name := range sampleNames {
		t.samples[i].Name = name
	}
	return t, nil
}

// Start sets the limit and GOGC and re-sets them after every collection until Stop. Until the first
// collection GOGC is MinGCPercent, so that it comes once the heap has grown by 4 MiB (Go's minimum heap at
// GOGC 100), not 16. Call it once.
func (t *Tuner) Start() {
	t.mu.Lock()
	t.previous = debug.SetMemoryLimit(-1)
	t.previousPercent = debug.SetGCPercent(t.cfg.MinGCPercent)
	debug.SetGCPercent(t.previousPercent)
	t.mu.Unlock()
	t.retune()
}

// Stop restores the limit and GOGC the runtime had before Start; the collection after it ends the Tuner's
// work. Safe to call twice.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	debug.SetMemoryLimit(t.previous)
	debug.SetGCPercent(t.previousPercent)
}

// Applied is the limit the Tuner last set, in bytes (0 before Start or with no Limit).
func (t *Tuner) Applied() int64 { return t.applied.Load() }

// Percent is the GOGC the Tuner last set (0 before Start or when it does not pace).
func (t *Tuner) Percent() int { return int(t.percent.Load()) }

// retune sets the limit for the heap as the last collection left it and arms itself for the next collection:
// a fresh sentinel's cleanup runs once a collection has found it unreachable.
func (t *Tuner) retune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	metrics.Read(t.samples)
	stats, at := t.readStats(), t.now()
	if t.cfg.Limit > 0 {
		limit := limitFor(t.cfg, stats)
		debug.SetMemoryLimit(limit)
		t.applied.Store(limit)
	}
	if percent, ok := t.pacedPercent(stats, at); ok && int64(percent) != t.percent.Load() {
		debug.SetGCPercent(percent)
		t.percent.Store(int64(percent))
	}
	t.lastAllocs, t.lastAt = stats.allocated, at
	t.retunes++
	runtime.AddCleanup(&sentinel{}, func(t *Tuner) { t.retune() }, t)
}

// sentinel is allocated for its cleanup alone; it holds a pointer so that it is never packed into a tiny
// allocation block with other objects, which would keep it alive past the collection it must mark.
type sentinel struct{ _ *byte }

func (t *Tuner) readStats() heapStats {
	value := func(i int) uint64 {
		if t.samples[i].Value.Kind() != metrics.KindUint64 {
			return 0 // a metric this runtime lacks: count nothing for it
		}
		return t.samples[i].Value.Uint64()
	}
	live, total, released, objects, unused, free := value(0), value(1), value(2), value(3), value(4), value(5)
	heap := objects + unused + free
	return heapStats{live: live, outsideHeap: total - min(total, released+heap), allocated: value(6)}
}

// heapStats is what the limit and the pace depend on, as the last collection left it.
type heapStats struct {
	live        uint64 // bytes of heap objects the collection found reachable (0 before the first)
	outsideHeap uint64 // bytes the runtime maps outside the heap (stacks, its own structures), not released
	allocated   uint64 // bytes allocated on the heap since the process started
}

// pacedPercent is the GOGC to set after a collection, and false when the Tuner does not pace (a negative
// AllocWindow, GOGC off or no higher than MinGCPercent at Start). It is the process's allocation over the
// cycle since the last retune, scaled to AllocWindow, in percent of its live heap, between MinPacePercent and
// the GOGC the process had at Start; MinGCPercent at Start, MinPacePercent after the first collection. The
// first cycle is the process's start-up, whose burst says nothing of how fast it allocates afterwards: paced
// by it, an idle process went to GOGC 400 and grew to 16 MiB before its next collection, two minutes later.
// At MinPacePercent the next collection comes soon after, and a busy process is paced up from there.
func (t *Tuner) pacedPercent(s heapStats, at time.Time) (int, bool) {
	lo, hi := t.cfg.MinGCPercent, t.previousPercent
	if t.cfg.AllocWindow < 0 || hi <= lo {
		return 0, false
	}
	if t.lastAt.IsZero() || s.live == 0 {
		return lo, true
	}
	if t.retunes < 2 {
		return t.cfg.MinPacePercent, true
	}
	elapsed := at.Sub(t.lastAt)
	if elapsed <= 0 {
		return hi, true
	}
	inWindow := float64(s.allocated-min(s.allocated, t.lastAllocs)) * float64(t.cfg.AllocWindow) / float64(elapsed)
	return int(min(max(inWindow*100/float64(s.live), float64(t.cfg.MinPacePercent)), float64(hi))), true
}

// limitFor is the limit to set: cfg.Limit, or what lets the heap grow by cfg.MinGCPercent of its live size
// on top of the memory outside the heap, whichever is larger.
func limitFor(cfg Config, s heapStats) int64 {
	floor := s.outsideHeap + s.live + s.live*uint64(cfg.MinGCPercent)/100
	if floor > uint64(cfg.Limit) {
		return int64(min(floor, uint64(1<<63-1)))
	}
	return cfg.Limit
}
