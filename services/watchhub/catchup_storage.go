package watchhub

import (
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// errStepDone stops a history read once a step has read enough.
var errStepDone = errors.New("catch-up step done")

// catchUpFromStorage sends a cohort the events of its range from storage history, from its next revision up
// to through (the revision before the window), then on from the window. As etcd batches an unsynced
// watcher's events, a response carries up to watchBatchMaxRevs revisions with events, whether they came from
// storage, the window or both. On a storage failure the members wait and retry; on compaction they are
// canceled as etcd cancels them.
func (s *stream) catchUpFromStorage(c *cohort, through int64) error {
	h := s.hub
	key, rangeEnd := c.spec.historyRange()
	req := &storagepb.HistoryRequest{Key: key, RangeEnd: rangeEnd, StartRevision: c.nextRev, EndRevision: through,
		PrevKv: c.spec.prevKV, PageSize: int64(h.cfg.HistoryPageSize)}
	b := catchUpBatch{s: s, c: c}
	var asm revisionAssembler
	read := 0
	compactRev, err := h.history(s.ctx, req, func(page *storagepb.HistoryResponse) error {
		read += len(page.Events)
		if err := b.add(asm.add(page.Events)); err != nil {
			return err
		}
		if read >= storageStepEvents {
			return errStepDone
		}
		return nil
	})
	switch {
	case err == nil:
		if err := b.add(asm.finish()); err != nil {
			return err
		}
		b.fromWindow(through + 1)
		return b.flush()
	case errors.Is(err, errStepDone):
		return b.flush()
	case isSendError(err):
		return err
	case storageclient.IsCompacted(err):
		h.noteCompacted(compactRev)
		h.mu.RLock()
		compactRev = max(compactRev, h.compactRev)
		h.mu.RUnlock()
		err := s.sendCompacted(c.members, compactRev)
		c.members = nil
		return err
	case s.ctx.Err() != nil:
		return sendError{s.ctx.Err()}
	}
	h.logger.Warn("watch catch-up from storage failed; retrying", "watchers", len(c.members), "from", c.nextRev,
		"through", through, "err", err)
	for _, w := range c.members {
		w.retryAt = time.Now().Add(storageRetryDelay)
	}
	return b.flush()
}

// catchUpBatch gathers a cohort's catch-up events into responses of up to watchBatchMaxRevs revisions with
// events. The cohort advances only past the revisions sent.
type catchUpBatch struct {
	s              *stream
	c              *cohort
	events         []*mvccpb.Event
	revsWithEvents int
	next           int64 // the revision after the last one gathered; 0 when nothing is
}

// add gathers whole revisions, sending a response each time the batch is full.
func (b *catchUpBatch) add(revs []revisionEvents) error {
	if len(revs) == 0 {
		return nil
	}
	h := b.s.hub
	h.mu.RLock()
	compactRev := h.compactRev
	h.mu.RUnlock()
	for _, r := range revs {
		n := len(b.events)
		b.events = b.c.spec.selectEvents(b.events, r.events, compactRev)
		b.next = r.rev + 1
		if len(b.events) > n {
			b.revsWithEvents++
		}
		if b.revsWithEvents == watchBatchMaxRevs {
			if err := b.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// fromWindow moves the batch to from (storage had nothing more up to it) and fills what room is left from
// the window, as one response continues from storage into memory.
func (b *catchUpBatch) fromWindow(from int64) {
	b.next = from
	h := b.s.hub
	h.mu.RLock()
	read := h.readWindow(&b.c.spec, from, watchBatchMaxRevs-b.revsWithEvents)
	h.mu.RUnlock()
	if read.kind == readEvents {
		b.events = append(b.events, read.events...)
		b.next = read.next
	}
}

// flush sends what is gathered as one response and advances the cohort past it.
func (b *catchUpBatch) flush() error {
	if b.next == 0 {
		return nil
	}
	h := b.s.hub
	h.mu.RLock()
	header := h.responseHeader(h.win.head)
	h.mu.RUnlock()
	b.c.advance(b.next)
	events := b.events
	b.events, b.revsWithEvents, b.next = nil, 0, 0
	return b.s.sendEvents(b.c, header, events)
}
