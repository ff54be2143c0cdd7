package watchhub

import (
	"errors"
	"time"

	"google.golang.org/grpc/mem"

	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// sendError is a failed write to the client: the stream is over.
type sendError struct{ err error }

func (e sendError) Error() string { return "watch stream send: " + e.err.Error() }
func (e sendError) Unwrap() error { return e.err }

// sendLoop is the stream's sender: it writes queued responses in order, catches up watchers that are behind,
// and sends the periodic progress notifications, until the stream ends or a write fails.
func (s *stream) sendLoop() {
	defer s.hub.senders.Done()
	defer s.stats.flush(s.hub.metrics)
	progress := time.NewTicker(s.hub.progressInterval())
	defer progress.Stop()
	for {
		select {
		case <-progress.C:
			s.progressTick()
		default:
		}
		if err := s.flush(); err != nil {
			s.hub.logger.Debug("watch stream send failed", "err", err)
			return
		}
		worked, err := s.catchUpRound()
		if err != nil {
			s.hub.logger.Debug("watch stream send failed", "err", err)
			return
		}
		if worked {
			if s.stats.due(time.Now()) {
				s.stats.flush(s.hub.metrics)
			}
			continue
		}
		if err := s.sendBatch(); err != nil { // written since the last flush (a catch-up round's cancels)
			s.hub.logger.Debug("watch stream send failed", "err", err)
			return
		}
		s.stats.flush(s.hub.metrics)
		s.lists.Release()
		select {
		case <-s.wake:
		case <-progress.C:
			s.progressTick()
		case <-s.retryTimer():
		case <-s.closed:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// A sender that never pauses adds its counts to the hub's metrics once it has statsFlushEvery responses or lag
// observations counted, or its oldest count is statsFlushInterval old: a stream catching up writes few, large
// responses (up to 1000 revisions each), and its counts would otherwise wait for the end of the catch-up (under
// an overload with no lag bound, the hub's metrics showed no event sent for 50 s while it sent 1.5M a second).
const (
	statsFlushEvery    = 1024
	statsFlushInterval = time.Second
)

// flush writes everything queued, and sends the relay batch they went into. On a stream held to its
// frontend's acknowledgments it first waits until another batch may be sent (relayFlow.wait), so that a backlog
// waits in the queue rather than in what it took.
func (s *stream) flush() error {
	for {
		if s.flow != nil {
			if _, err := s.flow.wait(s.ctx, s.closed); err != nil {
				return sendError{err}
			}
		}
		taken := s.take()
		if taken.len == 0 {
			return s.sendBatch()
		}
		s.merger.mergeRuns(&taken, s.hub.cfg.fragmentBytes())
		written, err := s.writeFrames(&taken)
		s.merger.reset()
		s.giveBack(&taken)
		if err != nil {
			return err
		}
		if s.stats.due(written) {
			s.stats.flush(s.hub.metrics)
		}
	}
}

// writeFrames writes the frames taken, in order. It reads the clock once per chunk of the outbox (up to
// outboxChunkFrames frames), and again after a wait for acknowledgments: the lag checks of a chunk's frames use
// the reading taken before them, and their delivery latency the one taken after them. So a latency is overstated
// by at most the time to write a chunk, and a lag understated by as much. It returns the last reading.
func (s *stream) writeFrames(taken *outbox) (time.Time, error) {
	now := time.Now()
	for c := taken.head; c != nil; c = c.next {
		for i := range c.n {
			if s.flowWaited {
				now, s.flowWaited = time.Now(), false
			}
			if err := s.write(&c.frames[i], now); err != nil {
				return now, err
			}
		}
		now = time.Now()
		s.stats.stamp(now)
	}
	return now, nil
}

// write writes one frame; now is a recent reading of the clock, for the lag check.
func (s *stream) write(f *frame, now time.Time) error {
	switch {
	case f.merged:
		return nil // written with an earlier frame of its watcher
	case f.shared != nil:
		return s.writeShared(f.w, f.shared, s.merger.more(f), now)
	}
	ctl := f.ctl
	if ctl.slot {
		defer s.releaseSlot()
	}
	switch {
	case ctl.catchUpFrom > 0:
		if !f.w.canceled.Load() {
			f.w.nextRev, f.w.retryAt = ctl.catchUpFrom, time.Time{}
			s.catchUp = append(s.catchUp, f.w)
		}
		return nil
	case f.w != nil && f.w.canceled.Load():
		return nil
	}
	if err := s.sendResponse(ctl.resp); err != nil {
		return err
	}
	s.stats.responses++
	return nil
}

// writeShared writes a shared response (all its fragments) to w, unless w is canceled; the responses in more
// (single parts, see mergeRuns) go out in the same message, after it. now is a recent reading of the clock, for
// the lag check.
func (s *stream) writeShared(w *watcher, shared *sharedResponse, more []*sharedResponse, now time.Time) error {
	defer func() {
		shared.traced.release()
		for _, m := range more {
			m.traced.release()
		}
	}()
	if w.canceled.Load() {
		return nil
	}
	if s.overdue(w, shared, now) {
		return s.cancelLagging([]*watcher{w})
	}
	var carrier mem.Buffer
	if shared.traced != nil && s.relayTrace {
		carrier = shared.traced.relay
	}
	defer s.traceSent(shared, more)
	var stamp uint64
	if s.stamps {
		stamp = s.hub.lagStamp(w, shared.arrived)
	}
	var idLists *wiremsg.BufferLists // a relay batch copies the field itself (sendEncoded)
	if s.batch == nil {
		idLists = &s.lists
	}
	for i, part := range shared.boxed {
		s.enc = encodedResponse{trace: carrier, watchID: w.idField.buffer(idLists), part: part, stamp: stamp, lists: &s.lists}
		if i == len(shared.boxed)-1 {
			s.enc.more = more
		}
		if err := s.sendEncoded(&s.enc); err != nil {
			return err
		}
	}
	s.enc = encodedResponse{}
	w.sentEvents = true
	s.stats.sent(len(shared.parts), shared.events, shared.received)
	for _, m := range more {
		s.stats.sent(0, m.events, m.received)
	}
	return nil
}

// traceSent ends the send stage of the sampled responses among those just written.
func (s *stream) traceSent(shared *sharedResponse, more []*sharedResponse) {
	var written time.Time
	for i := -1; i < len(more); i++ {
		r := shared
		if i >= 0 {
			r = more[i]
		}
		if r.traced == nil {
			continue
		}
		if written.IsZero() {
			written = time.Now()
		}
		s.hub.stages.Span(r.traced.ctx, "watchhub.send", r.queued, written)
		r.traced.ended(written)
	}
}

// catchUpRound moves every cohort of catching-up watchers that is not waiting for a retry one step forward,
// writing what was queued meanwhile after each step; it reports whether it did anything.
func (s *stream) catchUpRound() (bool, error) {
	if len(s.catchUp) == 0 {
		return false, nil
	}
	now := time.Now()
	var waiting, ready []*watcher
	for _, w := range s.catchUp {
		if w.retryAt.After(now) {
			waiting = append(waiting, w)
		} else {
			ready = append(ready, w)
		}
	}
	if len(ready) == 0 {
		return false, nil
	}
	s.catchUp = nil // watchers that fall behind during the round are appended here
	keep := waiting
	all := cohorts(ready)
	for i, c := range all {
		behind, err := s.catchUpStep(c)
		keep = append(keep, behind...)
		if err == nil {
			err = s.flush()
		}
		if err != nil {
			for _, rest := range all[i+1:] {
				keep = append(keep, rest.members...)
			}
			s.catchUp = append(keep, s.catchUp...)
			return true, err
		}
	}
	s.catchUp = append(keep, s.catchUp...)
	return true, nil
}

// retryTimer fires when the first watcher waiting for a storage retry may try again (never, if none waits).
func (s *stream) retryTimer() <-chan time.Time {
	var first time.Time
	now := time.Now()
	for _, w := range s.catchUp {
		if w.retryAt.After(now) && (first.IsZero() || w.retryAt.Before(first)) {
			first = w.retryAt
		}
	}
	if first.IsZero() {
		return nil
	}
	return time.After(time.Until(first))
}

func isSendError(err error) bool {
	var se sendError
	return errors.As(err, &se)
}
