package storage

import (
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// LeaseChange is one lease change of an applied entry (granted with TTL, revoked, or checkpointed).
type LeaseChange = mvcc.LeaseChange

// AppliedRecord is what one applied entry changed.
type AppliedRecord struct {
	// Index and Term are the entry's log position.
	Index, Term uint64
	// Revision is the store revision after the entry.
	Revision int64
	// Events are the key changes, in order, all at Revision, with PrevKv when the key existed.
	Events []*mvccpb.Event
	// Leases are the lease changes, in order.
	Leases []LeaseChange
	// CompactRevision is set when the entry was a compaction.
	CompactRevision int64
	// Alarms is set when the entry changed the alarms: the alarms now active.
	Alarms []*pb.AlarmMember
	// Trace is the trace context of the apply span (obs.Telemetry.Inject), so consumers continue the trace.
	Trace map[string]string
}

// AppliedSink receives a record for every applied entry that changed something, in apply order, from the apply
// loop: Applied must be quick (or buffer), since applying waits for it. After a crash or a storage failure the
// entries since the last bbolt commit are applied again, so a sink sees them again, identical and in order:
// consumers de-duplicate by Index (or Revision).
type AppliedSink interface {
	Applied(rec AppliedRecord)
}

// NopSink drops every record.
type NopSink struct{}

// Applied does nothing.
func (NopSink) Applied(AppliedRecord) {}

// MemorySink keeps every record, for tests.
type MemorySink struct {
	mu      sync.Mutex
	records []AppliedRecord
	changed chan struct{}
}

// NewMemorySink returns an empty MemorySink.
func NewMemorySink() *MemorySink { return &MemorySink{changed: make(chan struct{})} }

// Applied keeps rec.
func (m *MemorySink) Applied(rec AppliedRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.records = append(m.records, rec)
	close(m.changed)
	m.changed = make(chan struct{})
}

// Records returns the records so far and a channel closed when more arrive.
func (m *MemorySink) Records() ([]AppliedRecord, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]AppliedRecord(nil), m.records...), m.changed
}
