package watchhub

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cairn-kv/cairn/api/eventpb"
	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/pace"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// Feed limits: records waiting for the feed goroutine (past it NATS records are dropped and later filled from
// storage), revisions held ahead of a gap, and revisions read from storage per fill.
const (
	busQueueLength      = 16384
	maxPendingRevisions = 8192
	maxFillRevisions    = 10000
	fillRetryDelay      = 100 * time.Millisecond
)

// busRecord is a record as it came off the bus.
type busRecord struct {
	rec      *eventpb.AppliedRecord
	meta     eventbus.Meta
	received time.Time
}

// feed follows the store: it takes records from the bus, puts them in revision order through the sequencer,
// fills what the bus missed from storage history, and hands contiguous revisions to the hub. Everything but
// onRecord runs on the feed's own goroutine.
type feed struct {
	hub     *Hub
	records busQueue
	seq     *sequencer
	wake    chan struct{} // the hub got its first watch stream (see interest.go)

	polledRev  int64 // the highest storage revision at the previous poll
	pollPace   *pace.Stretch
	heard      bool      // a record came over the bus since the previous poll
	retryAt    time.Time // a fill failed: not again before then
	lastStatus atomic.Int64
	lastWarn   time.Time
}

func newFeed(h *Hub) *feed {
	return &feed{hub: h, records: busQueue{ready: make(chan struct{}, 1)}, wake: make(chan struct{}, 1)}
}

// onRecord is the bus handler; it never blocks NATS.
func (f *feed) onRecord(rec *eventpb.AppliedRecord, meta eventbus.Meta) {
	if !f.records.push(busRecord{rec: rec, meta: meta, received: time.Now()}) {
		f.hub.metrics.busRecords.WithLabelValues("queue_full").Inc()
	}
}

func (f *feed) run(ctx context.Context) {
	if !f.initialize(ctx) {
		return
	}
	f.pollPace = pace.New(f.hub.cfg.StoragePollInterval, idlePollFactor*f.hub.cfg.StoragePollInterval)
	poll := time.NewTimer(f.pollPace.Wait())
	defer poll.Stop()
	for {
		for f.fillDue() && f.fill(ctx) {
		}
		var retry <-chan time.Time
		if !f.retryAt.IsZero() {
			retry = time.After(time.Until(f.retryAt))
		}
		select {
		case <-ctx.Done():
			return
		case <-f.records.ready:
			for _, br := range f.records.take() {
				f.heard = true
				f.handle(br)
			}
		case <-poll.C:
			poll.Reset(f.poll(ctx))
		case <-f.wake:
			f.catchUp(ctx)
			poll.Reset(f.pollPace.Reset()) // watched now: back to the full pace
		case <-retry:
			f.retryAt = time.Time{}
		}
	}
}

// subscribedWait is how long initialize waits for the NATS server to confirm the hub's subscription.
const subscribedWait = time.Second

// initialize learns the store's revision from storage, retrying until one answers.
//
// It first waits, up to subscribedWait, until the NATS server has the hub's subscription: a revision written
// after the one read here then comes over the bus. Without that wait a write just after the hub's first watch
// could be published before the server knew of the hub, and reach the hub only at the next poll, when the gap
// shows. A hub whose NATS server does not answer serves anyway, from storage polls, as it does whenever the bus
// is down.
func (f *feed) initialize(ctx context.Context) bool {
	if err := eventbus.Confirm(ctx, f.hub.nc, subscribedWait); err != nil && ctx.Err() == nil {
		f.hub.logger.Warn("watchhub serves from storage polls until the bus answers", "nats", f.hub.cfg.NATSURL, "err", err)
	}
	for {
		if head, compactRev, ok := f.pollStatus(ctx); ok {
			f.seq = newSequencer(head, maxPendingRevisions)
			f.polledRev = head
			f.hub.initialize(head, compactRev)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(f.hub.cfg.StoragePollInterval):
		}
	}
}

func (f *feed) handle(br busRecord) {
	rec := br.rec
	if rec.CompactRevision > 0 {
		f.hub.noteCompacted(rec.CompactRevision)
	}
	if len(rec.Events) == 0 {
		f.seq.noteExists(rec.Revision)
		return
	}
	if err := f.openBusEvents(rec.Events); err != nil {
		f.hub.metrics.busRecords.WithLabelValues("unopened").Inc()
		f.hub.logger.Warn("bus record dropped: its values do not open; the revision will be filled from storage",
			"revision", rec.Revision, "err", err)
		return
	}
	traced := f.hub.startEvent(br.meta.Trace, rec.Revision, br.received)
	run, result := f.seq.offer(newRevisionEvents(rec.Revision, rec.Events, traced, br.received))
	f.hub.metrics.busRecords.WithLabelValues(result.String()).Inc()
	if len(run) > 0 {
		f.hub.deliver(run)
	}
}

func (r offerResult) String() string {
	return [...]string{"delivered", "duplicate", "early", "dropped"}[r]
}

// poll asks every storage for its revision. What storage had reached at the previous poll should have come
// over the bus by now: anything of it still missing is filled from history.
//
// While the store stands still (no record heard, the same revision polled) the wait before the next poll
// doubles, up to idlePollFactor times StoragePollInterval: an idle hub asks its storages every 2 s rather than
// every 500 ms. A record lost in an idle moment so waits at most that long; any movement brings the wait back.
// A hub without watch streams fills nothing (its first stream wakes it and it catches up then), so it polls
// only to follow storage's health and leader: its wait stretches to unwatchedPollFactor times; and such a poll
// empties its window (emptyIfUnwatched). poll returns the wait before the next poll (internal/pace's rule).
func (f *feed) poll(ctx context.Context) time.Duration {
	rev, _, ok := f.pollStatus(ctx)
	f.pollPace.Longest = pollLongest(f.hub.cfg.StoragePollInterval, f.hub.watched())
	wait := f.pollPace.Next(ok && rev == f.polledRev && !f.heard)
	f.heard = false
	if ok {
		f.seq.noteExists(f.polledRev)
		f.polledRev = rev
	}
	if !f.hub.watched() && f.hub.emptyIfUnwatched() {
		// Nothing is filled while unwatched, so what the sequencer holds ahead of a gap would wait for the
		// next stream; the wake's fill reads it again.
		f.seq.dropPending()
	}
	return wait
}

// idlePollFactor bounds how far the storage poll stretches while the store stands still, and
// unwatchedPollFactor how far while the hub also has no watch stream (4 s by default: its health needs an
// answer every 10 s, see feed.health).
const (
	idlePollFactor      = 4
	unwatchedPollFactor = 8
)

// pollLongest is the longest wait between polls while the store stands still: idlePollFactor times base
// (StoragePollInterval), or unwatchedPollFactor times while the hub has no watch stream.
func pollLongest(base time.Duration, watched bool) time.Duration {
	if watched {
		return idlePollFactor * base
	}
	return unwatchedPollFactor * base
}

// pollStatus returns the highest revision and compact revision the storages report, and notes the cluster
// header of the most advanced one; it prefers that storage for history.
func (f *feed) pollStatus(ctx context.Context) (rev, compactRev int64, ok bool) {
	answered, err := f.hub.pool.Statuses(ctx)
	if len(answered) == 0 {
		f.warn("no storage answered Status", "err", err)
		return 0, 0, false
	}
	best := answered[0]
	for _, a := range answered {
		compactRev = max(compactRev, a.Status.CompactRevision)
		if a.Status.Revision > best.Status.Revision {
			best = a
		}
	}
	f.lastStatus.Store(time.Now().UnixNano())
	f.hub.noteStorage(best.Status, compactRev)
	if preferred := f.hub.pool.Preferred(); preferred != best.Index {
		if !statusAtLeast(answered, preferred, best.Status.Revision) {
			f.hub.pool.Prefer(best.Index)
		}
	}
	return best.Status.Revision, compactRev, true
}

func statusAtLeast(answered []storageclient.EndpointStatus, index int, rev int64) bool {
	for _, a := range answered {
		if a.Index == index {
			return a.Status.Revision >= rev
		}
	}
	return false
}

// fillDue reports whether a fill should run now: the hub is watched, the last fill did not fail just now, a
// revision is missing, and no wake waits (its catchUp may jump over the gap instead; see streamsChanged).
func (f *feed) fillDue() bool {
	if !f.retryAt.IsZero() || !f.hub.watched() || len(f.wake) > 0 {
		return false
	}
	_, _, missing := f.seq.missing()
	return missing
}

// fill reads the first missing interval (at most maxFillRevisions of it) from storage history and hands it
// on; it reports whether it succeeded.
func (f *feed) fill(ctx context.Context) bool {
	from, to, _ := f.seq.missing()
	to = min(to, from+maxFillRevisions-1)
	f.hub.metrics.fills.Inc()
	err := f.fillRange(ctx, from, to)
	if err == nil {
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	f.hub.metrics.fillErrors.Inc()
	f.warn("filling revisions from storage history failed; retrying", "from", from, "to", to, "err", err)
	f.retryAt = time.Now().Add(fillRetryDelay)
	return false
}

// fillRange hands on revisions [from, to] read from history (every key, with prev kvs). A revision without
// retained events (a tombstone at the compact revision) is handed on empty.
func (f *feed) fillRange(ctx context.Context, from, to int64) error {
	req := &storagepb.HistoryRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: from, EndRevision: to,
		PrevKv: true, PageSize: int64(f.hub.cfg.HistoryPageSize)}
	var asm revisionAssembler
	expected := from
	offer := func(revs []revisionEvents, through int64) {
		now := time.Now()
		var run []revisionEvents
		for _, r := range revs {
			for ; expected < r.rev; expected++ {
				part, _ := f.seq.offer(revisionEvents{rev: expected, received: now})
				run = append(run, part...)
			}
			part, _ := f.seq.offer(newRevisionEvents(r.rev, r.events, nil, now))
			run = append(run, part...)
			expected = r.rev + 1
		}
		for ; expected <= through; expected++ {
			part, _ := f.seq.offer(revisionEvents{rev: expected, received: now})
			run = append(run, part...)
		}
		f.hub.metrics.filledRevisions.Add(float64(len(run)))
		if len(run) > 0 {
			f.hub.deliver(run)
		}
	}
	compactRev, err := f.hub.history(ctx, req, func(page *storagepb.HistoryResponse) error {
		offer(asm.add(page.Events), 0)
		return nil
	})
	switch {
	case err == nil:
		offer(asm.finish(), to)
		return nil
	case storageclient.IsCompacted(err) && compactRev > from:
		f.hub.skipCompacted(compactRev)
		f.seq.skipTo(compactRev)
		return nil
	}
	return fmt.Errorf("history [%d, %d]: %w", from, to, err)
}

// health reports an error when no storage has answered for a while.
func (f *feed) health() error {
	last := time.Unix(0, f.lastStatus.Load())
	if limit := max(10*f.hub.cfg.StoragePollInterval, 10*time.Second); time.Since(last) > limit {
		return fmt.Errorf("no storage answered for %s", time.Since(last).Round(time.Second))
	}
	return nil
}

// warn logs at most every few seconds: while storage is away every poll fails the same way.
func (f *feed) warn(msg string, args ...any) {
	if time.Since(f.lastWarn) < 5*time.Second {
		return
	}
	f.lastWarn = time.Now()
	f.hub.logger.Warn(msg, args...)
}
