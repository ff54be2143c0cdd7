package storage

import (
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/internal/obs"
)

// The stages storage records on a sampled request (the span contract in internal/obs): storage.submit, the
// storage side of a write, tiled by storage.propose (handing the entry to the log), storage.wait_commit (until
// the apply loop takes it), storage.apply (on every member, under the proposer's submit) and
// storage.wait_applied (until the submit wakes); a linearizable read's storage.read_index (its wait for the
// shared round, a consensus.read_index batch span linking every read it serves) and storage.wait_applied; and
// storage.bbolt_read. storage.bbolt_commit is a batch span linking the applies it made durable.

// commitLinks gathers the sampled applies waiting for their bbolt commit.
type commitLinks struct {
	mu    sync.Mutex
	batch obs.Batch
}

// add links the apply span sc to the next bbolt commit; only sampled applies get here.
func (c *commitLinks) add(sc trace.SpanContext) {
	c.mu.Lock()
	c.batch.AddContext(sc)
	c.mu.Unlock()
}

// committed records the bbolt commit of entries from start to end as a storage.bbolt_commit span when it
// carried a sampled apply. It runs on the store's commit, under its write lock: it only takes a short mutex.
func (s *Storage) committed(durableIndex uint64, entries int, start, end time.Time) {
	c := &s.commits
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.batch.Sampled() {
		return
	}
	c.batch.AddCount(entries - c.batch.Size())
	span := s.stages.StartBatchAt("storage.bbolt_commit", &c.batch, start)
	span.SetAttributes(obs.AttrRaftIndex.Int64(int64(durableIndex)))
	span.End(trace.WithTimestamp(end))
	c.batch.Reset()
}
