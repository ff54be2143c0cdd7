package watchhub

import (
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Catch-up pacing. watchBatchMaxRevs is etcd's: an unsynced watcher gets at most that many revisions with
// events per response. One step scans at most windowScanRevs revisions of the window, or reads at most
// storageStepEvents events of storage history, so that one far-behind watcher does not starve the others.
const (
	watchBatchMaxRevs = 1000
	windowScanRevs    = 10000
	storageStepEvents = 10000
	storageRetryDelay = 200 * time.Millisecond
)

// cohort is catching-up watchers of one stream with the same spec at the same next revision (typically a
// group that fell behind together): they are read for and encoded for once, as the live path does.
type cohort struct {
	spec    watchSpec
	nextRev int64
	members []*watcher
	// arrived is when the cohort's next revision reached the hub, as its lag was last checked (dropLagging):
	// the lag stamp of the step's responses.
	arrived time.Time
}

// cohorts splits the watchers into cohorts, keeping their order.
func cohorts(ws []*watcher) []*cohort {
	type cohortKey struct {
		spec    string
		nextRev int64
	}
	var out []*cohort
	index := map[cohortKey]*cohort{}
	for _, w := range ws {
		key := cohortKey{w.spec.groupKey(), w.nextRev}
		c := index[key]
		if c == nil {
			c = &cohort{spec: w.spec, nextRev: w.nextRev}
			index[key] = c
			out = append(out, c)
		}
		c.members = append(c.members, w)
	}
	return out
}

// live drops the canceled members; it reports whether any is left.
func (c *cohort) live() bool {
	c.members = slices.DeleteFunc(c.members, func(w *watcher) bool { return w.canceled.Load() })
	return len(c.members) > 0
}

// advance moves every member to rev.
func (c *cohort) advance(rev int64) {
	c.nextRev = rev
	for _, w := range c.members {
		w.nextRev = rev
	}
}

// windowReadKind is what a cohort found when it looked at the window.
type windowReadKind int

const (
	readCompacted windowReadKind = iota // it must start below the compact revision
	readAtHead                          // nothing left to read: it can join its group
	readBelow                           // it must start below the window: storage history first
	readEvents                          // events (perhaps none) from the window
)

type windowRead struct {
	kind       windowReadKind
	events     []*mvccpb.Event
	header     *pb.ResponseHeader
	next       int64 // the revision to read from next
	first      int64 // the window's first revision (readBelow)
	compactRev int64 // readCompacted
}

// catchUpStep moves a cohort one step towards the head: a batch from the window or from storage, or joining
// the group once it has everything up to the head. It returns the members still catching up.
func (s *stream) catchUpStep(c *cohort) ([]*watcher, error) {
	if !c.live() {
		return nil, nil
	}
	h := s.hub
	h.mu.RLock()
	read := h.readWindow(&c.spec, c.nextRev, watchBatchMaxRevs)
	arrived := h.arrivalOf(c.nextRev)
	h.mu.RUnlock()
	switch read.kind {
	case readCompacted:
		return nil, s.sendCompacted(c.members, read.compactRev)
	case readAtHead:
		return h.join(c.members), nil
	}
	if err := s.dropLagging(c, arrived); err != nil || !c.live() {
		return nil, err
	}
	c.arrived = arrived
	if read.kind == readBelow {
		return c.members, s.catchUpFromStorage(c, read.first-1)
	}
	c.advance(read.next)
	return c.members, s.sendEvents(c, read.header, read.events)
}

// readWindow collects the next batch for spec from rev on, at most maxRevs revisions with events; Hub.mu is
// held (shared).
func (h *Hub) readWindow(spec *watchSpec, from int64, maxRevs int) windowRead {
	switch {
	case from < h.compactRev:
		return windowRead{kind: readCompacted, compactRev: h.compactRev}
	case from > h.win.head:
		return windowRead{kind: readAtHead}
	case from < h.win.first():
		return windowRead{kind: readBelow, first: h.win.first()}
	}
	read := windowRead{kind: readEvents, header: h.responseHeader(h.win.head)}
	revsWithEvents := 0
	rev := from
	for ; rev <= h.win.head && rev < from+windowScanRevs && revsWithEvents < maxRevs; rev++ {
		r, _ := h.win.at(rev)
		n := len(read.events)
		read.events = spec.selectEvents(read.events, r.events, h.compactRev)
		if len(read.events) > n {
			revsWithEvents++
		}
	}
	read.next = rev
	return read
}

// sendEvents writes one catch-up response to each member of c: encoded once, cut into fragments if they asked.
func (s *stream) sendEvents(c *cohort, header *pb.ResponseHeader, events []*mvccpb.Event) error {
	ws := c.members
	if len(events) == 0 {
		return nil
	}
	limit := 0
	if ws[0].spec.fragment {
		limit = s.hub.cfg.fragmentBytes()
	}
	shared, err := encodeShared(header, events, limit)
	if err != nil {
		return err
	}
	shared.arrived = c.arrived
	for _, w := range ws {
		// A catch-up response is not live (no arrival time): no lag check, so no clock reading.
		if err := s.writeShared(w, shared, nil, time.Time{}); err != nil {
			return err
		}
	}
	return nil
}

// join makes watchers that have read up to the head synced; it returns those that must read more because
// the head moved on meanwhile.
func (h *Hub) join(ws []*watcher) []*watcher {
	h.mu.Lock()
	defer h.mu.Unlock()
	var behind []*watcher
	for _, w := range ws {
		switch {
		case w.canceled.Load():
		case w.nextRev <= h.win.head:
			behind = append(behind, w)
		default:
			w.minRev = w.nextRev
			h.groups.join(w)
			h.setState(w, stateSynced)
		}
	}
	h.metrics.groups.Set(float64(h.groups.len()))
	return behind
}

// sendCompacted tells watchers that their next revision is compacted, as etcd does: canceled, with the
// compact revision and a header at revision 0. They stay registered until the client cancels them.
func (s *stream) sendCompacted(ws []*watcher, compactRev int64) error {
	h := s.hub
	h.mu.Lock()
	var told []*watcher
	for _, w := range ws {
		if !w.canceled.Load() {
			h.setState(w, stateCompacted)
			told = append(told, w)
		}
	}
	header := h.responseHeader(0)
	h.mu.Unlock()
	for _, w := range told {
		h.metrics.compactedWatchers.Inc()
		if err := s.sendResponse(&pb.WatchResponse{Header: header, WatchId: w.id, Canceled: true,
			CompactRevision: compactRev}); err != nil {
			return err
		}
	}
	return nil
}

// revisionAssembler regroups history pages, which may cut a revision in two, into whole revisions.
type revisionAssembler struct {
	cur revisionEvents
}

// add takes a page's events and returns the revisions it completed (every one before the last seen).
func (a *revisionAssembler) add(events []*mvccpb.Event) []revisionEvents {
	var done []revisionEvents
	for _, ev := range events {
		rev := ev.Kv.ModRevision
		if rev != a.cur.rev && a.cur.rev != 0 {
			done = append(done, a.cur)
			a.cur = revisionEvents{}
		}
		a.cur.rev = rev
		a.cur.events = append(a.cur.events, ev)
	}
	return done
}

// finish returns the last revision, complete once the history has ended.
func (a *revisionAssembler) finish() []revisionEvents {
	if a.cur.rev == 0 {
		return nil
	}
	last := a.cur
	a.cur = revisionEvents{}
	return []revisionEvents{last}
}
