package leasekeeper

import (
	"container/heap"
	"math"
	"sort"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/api/eventpb"
	"github.com/cairn-kv/cairn/api/storagepb"
)

// lease is what a keeper knows of one lease. Every field is guarded by the table's mutex.
type lease struct {
	id  int64
	ttl int64 // granted TTL, seconds
	// index is the log index of the last change of this lease the table applied (grant or checkpoint); changes
	// at or below it are old news.
	index uint64
	// learnedAt is when this keeper first heard of the lease (it was granted at or before then).
	learnedAt time.Time
	// storedRemaining is the remaining TTL storage holds (0: none, or reset by a renewal since),
	// storedIndex the log index of the checkpoint that set it, and storedSeenAt when this keeper learned of it:
	// the checkpoint was proposed at or before then, so storedSeenAt + storedRemaining is no earlier than the
	// lease's deadline as it was when checkpointed.
	storedRemaining int64
	storedIndex     uint64
	storedSeenAt    time.Time

	// The rest is the active keeper's clock.
	deadline       time.Time
	nextCheckpoint time.Time
	// expiryKey orders the expiry heap: the deadline, or the time to retry a revoke in flight.
	expiryKey time.Time
	heapIndex int // position in the expiry heap; -1 when not in it
	// writing is set while a checkpoint or a reset of this lease is in flight, and closed when it is done: at
	// most one such write per lease is in flight, so storage applies them in the order the keeper decided them.
	writing chan struct{}
	// gone is closed when the lease leaves the table (revoked).
	gone chan struct{}
}

// remaining is the lease's remaining time on the active keeper's clock.
func (l *lease) remaining(now time.Time) time.Duration { return l.deadline.Sub(now) }

// table is a keeper's view of every lease: learned from storage (the initial load, reconciliation), from the bus
// and from the keeper's own writes, each change ordered by its log index. While the keeper is active it also
// keeps each lease's deadline, in a heap by expiry. Its methods take the current time, so its rules are tested
// without clocks.
type table struct {
	mu     sync.Mutex
	leases map[int64]*lease
	expiry expiryHeap
	active bool
	// tombstones remember revoked leases (id to revoke index) until a reconciliation at or past that index, so
	// a late copy of their grant from the bus does not bring them back; reconciledIndex is the applied index of
	// the latest reconciliation: bus grants at or below it are old news.
	tombstones      map[int64]uint64
	reconciledIndex uint64
	// checkpointInterval spaces the checkpoints of one lease.
	checkpointInterval time.Duration
	// clocksStarted is closed, and replaced, when a lease's clock starts while none was running: the expiry and
	// checkpoint loops sleep on it while no lease is on the clock (see clocks).
	clocksStarted chan struct{}
}

func newTable(checkpointInterval time.Duration) *table {
	return &table{leases: map[int64]*lease{}, tombstones: map[int64]uint64{}, checkpointInterval: checkpointInterval,
		clocksStarted: make(chan struct{})}
}

// clocks reports whether any lease is on the clock (the active keeper's expiry heap is not empty) and, when
// none is, a channel closed when one starts.
func (t *table) clocks() (<-chan struct{}, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.expiry.Len() > 0 {
		return nil, true
	}
	return t.clocksStarted, false
}

// add records a new lease (granted at or before now) unless it is known or was revoked after index. It returns
// the lease, new or known.
func (t *table) add(id, ttl int64, index uint64, now time.Time) *lease {
	if l := t.leases[id]; l != nil {
		return l
	}
	if revokedAt, ok := t.tombstones[id]; ok && revokedAt >= index {
		return nil
	}
	l := &lease{id: id, ttl: ttl, index: index, learnedAt: now, heapIndex: -1, gone: make(chan struct{})}
	t.leases[id] = l
	if t.active {
		t.startClock(l, now, now.Add(seconds(ttl)))
	}
	return l
}

// startClock gives l its deadline and first checkpoint time (active keeper only).
func (t *table) startClock(l *lease, now, deadline time.Time) {
	l.deadline = deadline
	l.nextCheckpoint = now.Add(t.checkpointInterval)
	l.expiryKey = deadline
	if l.heapIndex < 0 {
		if t.expiry.Len() == 0 {
			close(t.clocksStarted)
			t.clocksStarted = make(chan struct{})
		}
		heap.Push(&t.expiry, l)
	} else {
		heap.Fix(&t.expiry, l.heapIndex)
	}
}

// remove drops a lease revoked at index (0 when the index is unknown: storage said it was not found).
func (t *table) remove(id int64, index uint64) {
	l := t.leases[id]
	if l != nil && index != 0 && l.index > index {
		return // the record is older than what the table knows
	}
	if index == 0 && l != nil {
		index = l.index + 1
	}
	t.tombstones[id] = index
	if l == nil {
		return
	}
	delete(t.leases, id)
	if l.heapIndex >= 0 {
		heap.Remove(&t.expiry, l.heapIndex)
	}
	close(l.gone)
}

// checkpointed records that storage now holds remaining for the lease, set by the entry at index.
func (t *table) checkpointed(id, remaining int64, index uint64, now time.Time) {
	l := t.leases[id]
	if l == nil || index <= l.storedIndex {
		return
	}
	l.storedRemaining, l.storedIndex, l.storedSeenAt = remaining, index, now
	l.index = max(l.index, index)
}

// applyRecord applies the lease changes of one applied record from the bus, in order. Copies of one record (every
// member publishes it) and records older than what the table knows change nothing.
func (t *table) applyRecord(rec *eventpb.AppliedRecord, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range rec.Leases {
		switch c.Type {
		case eventpb.LeaseChange_GRANTED:
			if rec.Index > t.reconciledIndex { // at or below it, a reconciliation already knew the lease
				t.add(c.Id, c.Ttl, rec.Index, now)
			}
		case eventpb.LeaseChange_REVOKED:
			t.remove(c.Id, rec.Index)
		case eventpb.LeaseChange_CHECKPOINTED:
			t.checkpointed(c.Id, c.RemainingTtl, rec.Index, now)
		}
	}
}

// reconcile makes the table agree with storage's records, read linearizably at appliedIndex: leases storage
// lacks are dropped unless the table learned of them after that index, missing ones are added, and checkpoints
// the bus lost are taken. Tombstones at or below appliedIndex are dropped: the read covers them.
func (t *table) reconcile(records []*storagepb.LeaseRecord, appliedIndex uint64, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	inStorage := make(map[int64]bool, len(records))
	for _, r := range records {
		inStorage[r.Id] = true
		l := t.leases[r.Id]
		if l == nil {
			if l = t.add(r.Id, r.Ttl, appliedIndex, now); l == nil {
				continue
			}
			if t.active && r.RemainingTtl > 0 {
				t.startClock(l, now, now.Add(seconds(r.RemainingTtl)))
			}
		}
		if r.CheckpointIndex > l.storedIndex {
			t.checkpointed(r.Id, r.RemainingTtl, r.CheckpointIndex, now)
		}
	}
	for id, l := range t.leases {
		if !inStorage[id] && l.index <= appliedIndex {
			t.remove(id, appliedIndex)
		}
	}
	// Past the read, the watermark turns away late copies of grants at or below it, so those tombstones can go.
	t.reconciledIndex = max(t.reconciledIndex, appliedIndex)
	for id, revokedAt := range t.tombstones {
		if revokedAt <= t.reconciledIndex {
			delete(t.tombstones, id)
		}
	}
}

// promote starts the active keeper's clock on every lease, after a takeover, from storage's records read
// linearizably after the claim. oldStop is the latest time the previous keeper could still have renewed a lease
// or proposed a checkpoint. Each lease gets the latest deadline it could have had (so none expires early):
//   - a lease whose stored remaining TTL is set was not renewed since that checkpoint (a renewal resets it
//     through the log before it is answered), and the checkpoint was proposed before both oldStop and the time
//     this keeper learned of it: its deadline was at most min(seen, oldStop) + remaining;
//   - any other lease was renewed (or granted) at the latest by max(learned, oldStop): that + ttl;
//
// and every deadline is at least extension (the election timeout, as etcd's Promote extends by) after now, so
// clients cut off during the failover have that long to find the new keeper. Unlike etcd, which adds the
// extension to the remaining TTL, the extension is not added to a deadline already past it: the bound above is
// already as late as the lease could have lived, and adding to it would keep abandoned leases longer.
func (t *table) promote(records []*storagepb.LeaseRecord, appliedIndex uint64, oldStop time.Time, extension time.Duration, now time.Time) {
	t.reconcile(records, appliedIndex, now)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active = true
	t.expiry = t.expiry[:0]
	for _, l := range t.leases {
		l.heapIndex = -1
		var base time.Time
		if l.storedRemaining > 0 {
			base = minTime(l.storedSeenAt, oldStop).Add(seconds(l.storedRemaining))
		} else {
			base = maxTime(l.learnedAt, oldStop).Add(seconds(l.ttl))
		}
		t.startClock(l, now, maxTime(base, now.Add(extension)))
	}
}

// demote stops the clock: a standby keeps no deadlines.
func (t *table) demote() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active = false
	for _, l := range t.leases {
		l.heapIndex = -1
		l.deadline, l.nextCheckpoint, l.expiryKey = time.Time{}, time.Time{}, time.Time{}
	}
	t.expiry = t.expiry[:0]
}

// renew restarts a lease's full TTL (the caller made sure storage holds no remaining TTL for it).
func (t *table) renew(l *lease, now time.Time) {
	t.startClock(l, now, now.Add(seconds(l.ttl)))
}

// expired pops up to limit leases whose deadline has passed, and pushes each back to be retried after retry
// (the revoke the caller now proposes normally removes it first).
func (t *table) expired(now time.Time, limit int, retry time.Duration) []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []int64
	for len(ids) < limit && t.expiry.Len() > 0 {
		l := t.expiry[0]
		if l.expiryKey.After(now) {
			break
		}
		if l.deadline.After(now) { // a revoke retry time passed, but the lease was extended meanwhile
			l.expiryKey = l.deadline
		} else {
			l.expiryKey = now.Add(retry)
			ids = append(ids, l.id)
		}
		heap.Fix(&t.expiry, 0)
	}
	return ids
}

// dueCheckpoints returns up to limit checkpoints due by now, marking each lease as being written (done closes
// when the caller has finished the write). A lease is checkpointed once after each renewal (or grant or
// takeover), when at least a second has run off it: a later checkpoint of a lease not renewed since would say
// nothing new (checkpoint time + remaining is the same deadline). Every lease is looked at once per interval.
func (t *table) dueCheckpoints(now time.Time, limit int, done chan struct{}) []*pb.LeaseCheckpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return nil
	}
	var cps []*pb.LeaseCheckpoint
	for _, l := range t.leases {
		if len(cps) >= limit {
			break
		}
		if now.Before(l.nextCheckpoint) || l.writing != nil {
			continue
		}
		l.nextCheckpoint = now.Add(t.checkpointInterval)
		remaining := int64(math.Ceil(l.remaining(now).Seconds()))
		if remaining <= 0 || remaining >= l.ttl || l.storedRemaining > 0 {
			continue
		}
		l.writing = done
		cps = append(cps, &pb.LeaseCheckpoint{ID: l.id, Remaining_TTL: remaining})
	}
	return cps
}

// finishWrite records the outcome of a checkpoint or reset write of the given leases: on success (index != 0)
// storage holds the remaining TTLs, set by the entry at index.
func (t *table) finishWrite(cps []*pb.LeaseCheckpoint, index uint64, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cps {
		l := t.leases[c.ID]
		if l == nil {
			continue
		}
		l.writing = nil
		if index != 0 {
			t.checkpointed(c.ID, c.Remaining_TTL, index, now)
		}
	}
}

// leasesByExpiry returns the given IDs ordered by remaining time, as etcd lists leases; unknown IDs go last.
func (t *table) leasesByExpiry(ids []int64) []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := func(id int64) (time.Time, bool) {
		l := t.leases[id]
		if l == nil || !t.active {
			return time.Time{}, false
		}
		return l.deadline, true
	}
	sort.SliceStable(ids, func(i, j int) bool {
		di, oki := key(ids[i])
		dj, okj := key(ids[j])
		if oki != okj {
			return oki
		}
		return di.Before(dj)
	})
	return ids
}

// count is the number of leases known.
func (t *table) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.leases)
}

func seconds(n int64) time.Duration { return time.Duration(n) * time.Second }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// expiryHeap orders leases by expiryKey.
type expiryHeap []*lease

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expiryKey.Before(h[j].expiryKey) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}
func (h *expiryHeap) Push(x any) {
	l := x.(*lease)
	l.heapIndex = len(*h)
	*h = append(*h, l)
}
func (h *expiryHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.heapIndex = -1
	return l
}

// extendAll moves every deadline earlier than floor to floor (after the active keeper could not serve for a
// while).
func (t *table) extendAll(floor time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return
	}
	for _, l := range t.leases {
		if l.heapIndex >= 0 && l.deadline.Before(floor) {
			l.deadline, l.expiryKey = floor, floor
			heap.Fix(&t.expiry, l.heapIndex)
		}
	}
}
