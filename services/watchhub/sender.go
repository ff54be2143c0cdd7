package watchhub

import (
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// sendError is a failed write to the client: the stream is over.
type sendError struct{ err error }

func (e sendError) Error() string { return "watch stream send: " + e.err.Error() }
func (e sendError) Unwrap() error { return e.err }

// sendLoop is the stream's sender: it writes queued responses in order, catches up watchers that are behind,
// and sends the periodic progress notifications, until the stream ends or a write fails.
func (s *stream) sendLoop() {
	defer s.hub.senders.Done()
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
			continue
		}
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

// flush writes everything queued.
func (s *stream) flush() error {
	for {
		frames := s.take()
		if len(frames) == 0 {
			s.giveBack(frames)
			return nil
		}
		for i := range frames {
			if err := s.write(&frames[i]); err != nil {
				return err
			}
		}
		s.giveBack(frames)
	}
}

func (s *stream) write(f *frame) error {
	if f.ctrl {
		defer s.releaseSlot()
	}
	switch {
	case f.catchUpFrom > 0:
		if !f.w.canceled.Load() {
			f.w.nextRev, f.w.retryAt = f.catchUpFrom, time.Time{}
			s.catchUp = append(s.catchUp, f.w)
		}
		return nil
	case f.shared != nil:
		if f.w.canceled.Load() {
			return nil
		}
		for _, part := range f.shared.parts {
			if err := s.srv.SendMsg(&encodedResponse{watchID: f.w.id, part: part}); err != nil {
				return sendError{err}
			}
		}
		f.w.sentEvents = true
		s.hub.metrics.sent(len(f.shared.parts), f.shared.events, f.shared.received)
		return nil
	default:
		if f.w != nil && f.w.canceled.Load() {
			return nil
		}
		if err := s.srv.Send(f.resp); err != nil {
			return sendError{err}
		}
		s.hub.metrics.sent(1, 0, time.Time{})
		return nil
	}
}

// sendEvents writes a catch-up response for w, cut into fragments when w asked for them.
func (s *stream) sendEvents(w *watcher, resp *pb.WatchResponse) error {
	parts := []*pb.WatchResponse{resp}
	if w.spec.fragment {
		parts = splitFragments(resp, s.hub.cfg.fragmentBytes())
	}
	for _, p := range parts {
		if err := s.srv.Send(p); err != nil {
			return sendError{err}
		}
	}
	w.sentEvents = true
	s.hub.metrics.sent(len(parts), len(resp.Events), time.Time{})
	return nil
}

// catchUpRound moves every catching-up watcher that is not waiting for a retry one step forward, writing
// what was queued meanwhile after each step; it reports whether it did anything.
func (s *stream) catchUpRound() (bool, error) {
	if len(s.catchUp) == 0 {
		return false, nil
	}
	now := time.Now()
	pending := s.catchUp
	s.catchUp = nil // watchers that fall behind during the round are appended here
	var keep []*watcher
	worked := false
	for i, w := range pending {
		if w.retryAt.After(now) {
			keep = append(keep, w)
			continue
		}
		worked = true
		done, err := s.catchUpStep(w)
		if err == nil {
			err = s.flush()
		}
		if err != nil {
			s.catchUp = append(append(keep, pending[i:]...), s.catchUp...)
			return true, err
		}
		if !done {
			keep = append(keep, w)
		}
	}
	s.catchUp = append(keep, s.catchUp...)
	return worked, nil
}

// retryTimer fires when the first watcher waiting for a storage retry may try again (never, if none waits).
func (s *stream) retryTimer() <-chan time.Time {
	var first time.Time
	for _, w := range s.catchUp {
		if !w.retryAt.IsZero() && (first.IsZero() || w.retryAt.Before(first)) {
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
