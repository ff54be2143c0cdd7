package watchhub

import (
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/cairn-kv/cairn/pkg/cairnpb/storagepb"
	"github.com/cairn-kv/cairn/pkg/storageclient"
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

// windowReadKind is what a watcher found when it looked at the window.
type windowReadKind int

const (
	readCanceled  windowReadKind = iota // the watcher is gone
	readCompacted                       // it must start below the compact revision
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

// catchUpStep moves w one step towards the head: a batch from the window or from storage, or joining its
// group once it has everything up to the head. It reports whether w is done catching up.
func (s *stream) catchUpStep(w *watcher) (bool, error) {
	h := s.hub
	h.mu.RLock()
	read := h.readWindow(w)
	h.mu.RUnlock()
	switch read.kind {
	case readCanceled:
		return true, nil
	case readCompacted:
		return true, s.sendCompacted(w, read.compactRev)
	case readAtHead:
		return h.join(w), nil
	case readBelow:
		return false, s.catchUpFromStorage(w, read.first-1)
	}
	w.nextRev = read.next
	if len(read.events) == 0 {
		return false, nil
	}
	return false, s.sendEvents(w, &pb.WatchResponse{Header: read.header, WatchId: w.id, Events: read.events})
}

// readWindow collects w's next batch from the window; Hub.mu is held (shared).
func (h *Hub) readWindow(w *watcher) windowRead {
	switch {
	case w.canceled.Load():
		return windowRead{kind: readCanceled}
	case w.nextRev < h.compactRev:
		return windowRead{kind: readCompacted, compactRev: h.compactRev}
	case w.nextRev > h.win.head:
		return windowRead{kind: readAtHead}
	case w.nextRev < h.win.first():
		return windowRead{kind: readBelow, first: h.win.first()}
	}
	read := windowRead{kind: readEvents, header: h.responseHeader(h.win.head)}
	revsWithEvents := 0
	rev := w.nextRev
	for ; rev <= h.win.head && rev < w.nextRev+windowScanRevs && revsWithEvents < watchBatchMaxRevs; rev++ {
		r, _ := h.win.at(rev)
		n := len(read.events)
		read.events = w.spec.selectEvents(read.events, r.events, h.compactRev)
		if len(read.events) > n {
			revsWithEvents++
		}
	}
	read.next = rev
	return read
}

// join makes a watcher that has read up to the head synced; false when the head moved on meanwhile.
func (h *Hub) join(w *watcher) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case w.canceled.Load():
		return true
	case w.nextRev <= h.win.head:
		return false
	}
	w.minRev = w.nextRev
	h.groups.join(w)
	h.setState(w, stateSynced)
	h.metrics.groups.Set(float64(h.groups.len()))
	return true
}

// sendCompacted tells w that its next revision is compacted, as etcd does: canceled, with the compact
// revision and a header at revision 0. The watcher stays registered until the client cancels it.
func (s *stream) sendCompacted(w *watcher, compactRev int64) error {
	h := s.hub
	h.mu.Lock()
	if w.canceled.Load() {
		h.mu.Unlock()
		return nil
	}
	h.setState(w, stateCompacted)
	header := h.responseHeader(0)
	h.mu.Unlock()
	h.metrics.compactedWatchers.Inc()
	if err := s.srv.Send(&pb.WatchResponse{Header: header, WatchId: w.id, Canceled: true,
		CompactRevision: compactRev}); err != nil {
		return sendError{err}
	}
	return nil
}

// errStepDone stops a history read once a step has read enough.
var errStepDone = errors.New("catch-up step done")

// catchUpFromStorage sends w the events of its range from storage history, from w.nextRev up to through
// (the revision before the window), in responses cut at revision boundaries. On a storage failure w waits and
// retries; on compaction it is canceled as etcd cancels it.
func (s *stream) catchUpFromStorage(w *watcher, through int64) error {
	h := s.hub
	key, rangeEnd := w.spec.historyRange()
	req := &storagepb.HistoryRequest{Key: key, RangeEnd: rangeEnd, StartRevision: w.nextRev, EndRevision: through,
		PrevKv: w.spec.prevKV, PageSize: int64(h.cfg.HistoryPageSize)}
	var asm revisionAssembler
	read := 0
	send := func(revs []revisionEvents) error {
		h.mu.RLock()
		header, compactRev := h.responseHeader(h.win.head), h.compactRev
		h.mu.RUnlock()
		var events []*mvccpb.Event
		for _, r := range revs {
			events = w.spec.selectEvents(events, r.events, compactRev)
			w.nextRev = r.rev + 1
		}
		if len(events) == 0 {
			return nil
		}
		return s.sendEvents(w, &pb.WatchResponse{Header: header, WatchId: w.id, Events: events})
	}
	compactRev, err := h.pool.history(s.ctx, req, func(page *storagepb.HistoryResponse) error {
		read += len(page.Events)
		if err := send(asm.add(page.Events)); err != nil {
			return err
		}
		if read >= storageStepEvents {
			return errStepDone
		}
		return nil
	})
	switch {
	case err == nil:
		if err := send(asm.finish()); err != nil {
			return err
		}
		w.nextRev = through + 1
		return nil
	case errors.Is(err, errStepDone):
		return nil
	case isSendError(err):
		return err
	case storageclient.IsCompacted(err):
		h.noteCompacted(compactRev)
		h.mu.RLock()
		compactRev = max(compactRev, h.compactRev)
		h.mu.RUnlock()
		return s.sendCompacted(w, compactRev)
	case s.ctx.Err() != nil:
		return sendError{s.ctx.Err()}
	}
	h.logger.Warn("watch catch-up from storage failed; retrying", "watch_id", w.id, "from", w.nextRev,
		"through", through, "err", err)
	w.retryAt = time.Now().Add(storageRetryDelay)
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
