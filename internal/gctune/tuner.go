package gctune

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// DefaultMinGCPercent is the least headroom a Tuner leaves the heap: at 100 the heap may grow to twice its live
// size between collections (Go's default GOGC) whatever the limit, so the limit never makes the collector
// run more often than GOGC 100 would.
const DefaultMinGCPercent = 100

// Config is what a Tuner keeps the process to.
type Config struct {
	// Limit is the soft memory limit in bytes (all the memory the Go runtime maps, heap and stacks alike, as
	// GOMEMLIMIT counts it). It must be positive.
	Limit int64
	// MinGCPercent is the least heap growth, in percent of the live heap, the limit may leave: when the live
	// heap is too large for Limit the runtime's limit is raised to keep this much. 0 means
	// DefaultMinGCPercent.
	MinGCPercent int
}

// Validate reports what makes the configuration unusable.
func (c Config) Validate() error {
	var errs []error
	if c.Limit <= 0 {
		errs = append(errs, fmt.Errorf("gctune: memory limit %d bytes is not positive", c.Limit))
	}
	if c.MinGCPercent < 0 {
		errs = append(errs, fmt.Errorf("gctune: negative minimum GC percent %d", c.MinGCPercent))
	}
	return errors.Join(errs...)
}

// Tuner sets the process's soft memory limit after every collection: Config.Limit, or more when the live heap
// needs it (see the package comment). There is one per process: the runtime's limit is the process's.
type Tuner struct {
	cfg Config
	// mu orders retune against Stop, so that no limit is set after Stop restored the previous one.
	mu       sync.Mutex
	previous int64 // the runtime's limit before Start, restored by Stop
	stopped  bool
	samples  []metrics.Sample
	applied  atomic.Int64 // the limit last set
}

// the runtime/metrics names limitFor reads, in the order of the samples.
var sampleNames = [...]string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

// New returns a Tuner for cfg; Start puts it to work.
func New(cfg Config) (*Tuner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MinGCPercent == 0 {
		cfg.MinGCPercent = DefaultMinGCPercent
	}
	t := &Tuner{cfg: cfg, samples: make([]metrics.Sample, len(sampleNames))}
	for i, name := range sampleNames {
		t.samples[i].Name = name
	}
	return t, nil
}

// Start sets the limit and re-sets it after every collection until Stop. Call it once.
func (t *Tuner) Start() {
	t.mu.Lock()
	t.previous = debug.SetMemoryLimit(-1)
	t.mu.Unlock()
	t.retune()
}

// Stop restores the limit the runtime had before Start; the collection after it ends the Tuner's work. Safe to
// call twice.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	debug.SetMemoryLimit(t.previous)
}

// Applied is the limit the Tuner last set, in bytes (0 before Start).
func (t *Tuner) Applied() int64 { return t.applied.Load() }

// retune sets the limit for the heap as the last collection left it and arms itself for the next collection:
// a fresh sentinel's cleanup runs once a collection has found it unreachable.
func (t *Tuner) retune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	metrics.Read(t.samples)
	limit := limitFor(t.cfg, t.readStats())
	debug.SetMemoryLimit(limit)
	t.applied.Store(limit)
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
	return heapStats{live: live, outsideHeap: total - min(total, released+heap)}
}

// heapStats is what the limit depends on, as the last collection left it.
type heapStats struct {
	live        uint64 // bytes of heap objects the collection found reachable
	outsideHeap uint64 // bytes the runtime maps outside the heap (stacks, its own structures), not released
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
