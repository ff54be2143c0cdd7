package leasekeeper

import (
	"testing"
	"time"

	"github.com/cairn-kv/cairn/api/eventpb"
	"github.com/cairn-kv/cairn/api/storagepb"
)

var epoch0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return epoch0.Add(d) }

func record(index uint64, changes ...*eventpb.LeaseChange) *eventpb.AppliedRecord {
	return &eventpb.AppliedRecord{Index: index, Leases: changes}
}

func granted(id, ttl int64) *eventpb.LeaseChange {
	return &eventpb.LeaseChange{Type: eventpb.LeaseChange_GRANTED, Id: id, Ttl: ttl}
}

func revoked(id int64) *eventpb.LeaseChange {
	return &eventpb.LeaseChange{Type: eventpb.LeaseChange_REVOKED, Id: id}
}

func checkpointed(id, remaining int64) *eventpb.LeaseChange {
	return &eventpb.LeaseChange{Type: eventpb.LeaseChange_CHECKPOINTED, Id: id, RemainingTtl: remaining}
}

// TestTableAppliesBusRecordsInIndexOrder: copies and late records from other members change nothing.
func TestTableAppliesBusRecordsInIndexOrder(t *testing.T) {
	tests := []struct {
		name    string
		records []*eventpb.AppliedRecord
		want    map[int64]int64 // id → stored remaining; absent: not in the table
	}{
		{"grant", []*eventpb.AppliedRecord{record(5, granted(1, 10))}, map[int64]int64{1: 0}},
		{"grant twice (two members)", []*eventpb.AppliedRecord{record(5, granted(1, 10)), record(5, granted(1, 10))}, map[int64]int64{1: 0}},
		{"revoke then a late copy of the grant", []*eventpb.AppliedRecord{record(5, granted(1, 10)), record(9, revoked(1)), record(5, granted(1, 10))}, map[int64]int64{}},
		{"re-grant of a revoked ID", []*eventpb.AppliedRecord{record(5, granted(1, 10)), record(9, revoked(1)), record(12, granted(1, 10))}, map[int64]int64{1: 0}},
		{"checkpoint, then an older checkpoint", []*eventpb.AppliedRecord{record(5, granted(1, 10)), record(8, checkpointed(1, 4)), record(7, checkpointed(1, 6))}, map[int64]int64{1: 4}},
		{"checkpoint then reset", []*eventpb.AppliedRecord{record(5, granted(1, 10)), record(8, checkpointed(1, 4)), record(9, checkpointed(1, 0))}, map[int64]int64{1: 0}},
		{"revoke of an older grant does not remove a newer one", []*eventpb.AppliedRecord{record(12, granted(1, 10)), record(9, revoked(1))}, map[int64]int64{1: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTable(time.Second)
			for _, r := range tt.records {
				tb.applyRecord(r, at(0))
			}
			if len(tb.leases) != len(tt.want) {
				t.Fatalf("table has %d leases, want %d", len(tb.leases), len(tt.want))
			}
			for id, remaining := range tt.want {
				if l := tb.leases[id]; l == nil || l.storedRemaining != remaining {
					t.Fatalf("lease %d: %+v, want stored remaining %d", id, l, remaining)
				}
			}
		})
	}
}

// TestTablePromoteDeadlines: a new keeper never gives a lease a deadline before the one it could have had.
func TestTablePromoteDeadlines(t *testing.T) {
	const extension = time.Second
	oldStop := at(10 * time.Second)
	tests := []struct {
		name     string
		bus      []*eventpb.AppliedRecord // seen at 3s
		record   *storagepb.LeaseRecord
		deadline time.Duration
	}{
		{"never checkpointed: full TTL from when the old keeper stopped", []*eventpb.AppliedRecord{record(5, granted(1, 20))},
			&storagepb.LeaseRecord{Id: 1, Ttl: 20}, 10*time.Second + 20*time.Second},
		{"checkpoint seen on the bus: from when it was seen", []*eventpb.AppliedRecord{record(5, granted(1, 20)), record(6, checkpointed(1, 15))},
			&storagepb.LeaseRecord{Id: 1, Ttl: 20, RemainingTtl: 15, CheckpointIndex: 6}, 3*time.Second + 15*time.Second},
		{"checkpoint first learned at promotion: from when the old keeper stopped", []*eventpb.AppliedRecord{record(5, granted(1, 20))},
			&storagepb.LeaseRecord{Id: 1, Ttl: 20, RemainingTtl: 7, CheckpointIndex: 6}, 10*time.Second + 7*time.Second},
		{"reset after the checkpoint: full TTL", []*eventpb.AppliedRecord{record(5, granted(1, 20)), record(6, checkpointed(1, 7)), record(7, checkpointed(1, 0))},
			&storagepb.LeaseRecord{Id: 1, Ttl: 20, CheckpointIndex: 7}, 10*time.Second + 20*time.Second},
		{"lease first learned at promotion", nil, &storagepb.LeaseRecord{Id: 1, Ttl: 5}, 12*time.Second + 5*time.Second},
		{"a deadline that already passed gets the extension from now", []*eventpb.AppliedRecord{record(5, granted(1, 20)), record(6, checkpointed(1, 1))},
			&storagepb.LeaseRecord{Id: 1, Ttl: 20, RemainingTtl: 1, CheckpointIndex: 6}, 12*time.Second + extension},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTable(time.Second)
			for _, r := range tt.bus {
				tb.applyRecord(r, at(3*time.Second))
			}
			tb.promote([]*storagepb.LeaseRecord{tt.record}, 20, oldStop, extension, at(12*time.Second))
			l := tb.leases[1]
			if l == nil || !l.deadline.Equal(at(tt.deadline)) {
				t.Fatalf("deadline %v, want %v", l.deadline.Sub(epoch0), tt.deadline)
			}
			if tb.expiry.Len() != 1 || tb.expiry[0] != l {
				t.Fatal("promoted lease not in the expiry heap")
			}
		})
	}
}

// TestTableReconcile: storage's records (read at an index) win over the table, but not over what the table
// learned after that index.
func TestTableReconcile(t *testing.T) {
	tb := newTable(time.Second)
	tb.applyRecord(record(5, granted(1, 10), granted(2, 10)), at(0))
	tb.applyRecord(record(30, granted(3, 10)), at(0)) // after the read
	tb.applyRecord(record(31, revoked(4)), at(0))     // revoked after the read
	records := []*storagepb.LeaseRecord{
		{Id: 1, Ttl: 10, RemainingTtl: 6, CheckpointIndex: 8}, // checkpoint the bus lost
		{Id: 4, Ttl: 10}, // revoked after the read: stays revoked
		{Id: 5, Ttl: 10}, // granted, the bus lost it
	}
	tb.reconcile(records, 20, at(2*time.Second))
	tb.applyRecord(record(5, granted(2, 10)), at(3*time.Second)) // a late copy from another member
	want := map[int64]int64{1: 6, 3: 0, 5: 0}                    // 2 was revoked (absent from storage at 20)
	if len(tb.leases) != len(want) {
		t.Fatalf("leases %v, want %v", keysOf(tb.leases), want)
	}
	for id, remaining := range want {
		if l := tb.leases[id]; l == nil || l.storedRemaining != remaining {
			t.Fatalf("lease %d: %+v, want stored remaining %d", id, l, remaining)
		}
	}
	if _, ok := tb.tombstones[4]; !ok {
		t.Fatal("tombstone of a revoke after the read was dropped")
	}
}

func keysOf(m map[int64]*lease) []int64 {
	var ids []int64
	for id := range m {
		ids = append(ids, id)
	}
	return ids
}

// TestTableExpiryAndCheckpoints: expired leases come out in deadline order, each once per retry interval; a
// lease is checkpointed once per renewal, after a second has run off it.
func TestTableExpiryAndCheckpoints(t *testing.T) {
	tb := newTable(500 * time.Millisecond)
	tb.promote(nil, 0, at(0), 0, at(0))
	tb.mu.Lock()
	for id, ttl := range map[int64]int64{1: 3, 2: 2, 3: 10} {
		tb.add(id, ttl, uint64(id), at(0))
	}
	tb.mu.Unlock()
	if got := tb.expired(at(1900*time.Millisecond), 10, time.Second); len(got) != 0 {
		t.Fatalf("expired before any deadline: %v", got)
	}
	if got := tb.expired(at(3*time.Second), 10, time.Second); len(got) != 2 || got[0] != 2 || got[1] != 1 {
		t.Fatalf("expired at 3s = %v, want [2 1]", got)
	}
	if got := tb.expired(at(3500*time.Millisecond), 10, time.Second); len(got) != 0 {
		t.Fatalf("expired again before the retry interval: %v", got)
	}
	if got := tb.expired(at(4*time.Second), 1, time.Second); len(got) != 1 {
		t.Fatalf("retry after the interval, limited to 1: %v", got)
	}

	done := make(chan struct{})
	cps := tb.dueCheckpoints(at(600*time.Millisecond), 10, done)
	if len(cps) != 0 {
		t.Fatalf("checkpoints before a second ran off: %v", cps)
	}
	cps = tb.dueCheckpoints(at(1200*time.Millisecond), 10, done)
	got := map[int64]int64{}
	for _, c := range cps {
		got[c.ID] = c.Remaining_TTL
	}
	if len(got) != 3 || got[1] != 2 || got[2] != 1 || got[3] != 9 {
		t.Fatalf("checkpoints at 1.2s = %v, want remaining TTLs rounded up: 1:2 2:1 3:9", got)
	}
	if again := tb.dueCheckpoints(at(2*time.Second), 10, done); len(again) != 0 {
		t.Fatalf("checkpoint while one is in flight: %v", again)
	}
	tb.finishWrite(cps, 40, at(1300*time.Millisecond))
	if again := tb.dueCheckpoints(at(3*time.Second), 10, done); len(again) != 0 {
		t.Fatalf("second checkpoint without a renewal: %v", again)
	}
}
