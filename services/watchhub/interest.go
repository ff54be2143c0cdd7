package watchhub

import (
	"context"
	"time"

	"github.com/cairn-kv/cairn/internal/eventbus"
)

// interestInterval is how often a hub with watch streams tells the storages' publishers that it needs the
// applied records (eventbus.AnnounceInterest); well within eventbus.DefaultInterestTTL.
const interestInterval = time.Second

// A hub needs the bus only while it has watch streams. Without any it announces nothing, so the storages stop
// publishing applied records (when every hub is idle, a write costs no fan-out work at all, as in etcd); what
// they still send (for InterestTTL after the last announcement, or after a storage starts) it drops undecoded;
// and it does not fill what it missed: its head stays behind. Its window, which serves only watchers, is
// emptied at the first storage poll without a stream, so an idle hub holds none of it (up to WindowRevisions
// revisions, and the garbage collector's headroom over them). The first stream wakes it: it announces at once,
// and the feed fills the gap from history as usual, or, when the gap is more than the window holds, jumps the
// head to storage's revision (no watcher can miss what it skips: there is none yet; with one, it fills).

// watched reports whether the hub has a watch stream.
func (h *Hub) watched() bool { return h.streamCount.Load() > 0 }

// announceInterest runs until ctx ends, announcing every interestInterval while the hub is watched, and at once
// when the first stream opens. While the hub is unwatched it waits for the first stream alone: its ticker, unread,
// does not wake the process (a Go timer channel's timer runs only while a goroutine waits on it), so an idle hub
// has one wakeup a second fewer.
func (h *Hub) announceInterest(ctx context.Context) {
	tick := time.NewTicker(interestInterval)
	defer tick.Stop()
	for {
		if h.watched() {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if !h.watched() {
					continue
				}
			case <-h.firstStream:
			}
		} else {
			select {
			case <-ctx.Done():
				return
			case <-h.firstStream:
			}
			tick.Reset(interestInterval) // the next announcement one interval after this one
		}
		if err := eventbus.AnnounceInterest(h.nc, h.cfg.SubjectPrefix); err != nil {
			h.logger.Debug("announcing interest in applied records failed", "err", err)
		}
	}
}

// streamsChanged mirrors len(h.streams) for watched (mu is held); the first stream wakes the announcer and the
// feed. The feed's wake is queued before the count changes, so a feed that sees the hub watched also sees the
// wake, and decides between a jump and a fill (catchUp) before it fills anything (fillDue).
func (h *Hub) streamsChanged() {
	first := h.streamCount.Load() == 0 && len(h.streams) > 0
	if first {
		h.headMu.Lock()
		if h.waking == nil {
			h.waking = make(chan struct{})
		}
		h.headMu.Unlock()
		signal(h.feed.wake)
	}
	h.streamCount.Store(int64(len(h.streams)))
	if first {
		signal(h.firstStream)
	}
}

// signal queues a wake-up on c, a channel of one, unless one is already queued.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// catchUp runs on the feed when the hub is woken: if it lags storage by more than its window holds (a fill
// would only pass revisions through the window), it jumps to storage's revision while no watcher exists;
// otherwise the usual fills close the gap, and the window holds what it would have had. It always asks
// storage: the previous poll can be seconds old (an unwatched hub's poll wait stretches), and the store may
// have moved since.
func (f *feed) catchUp(ctx context.Context) {
	defer f.hub.awoken()
	head, compactRev, ok := f.pollStatus(ctx)
	if !ok {
		return
	}
	if head-f.hub.headRev.Load() > int64(f.hub.cfg.WindowRevisions) && f.hub.jumpTo(head, compactRev) {
		f.seq = newSequencer(head, maxPendingRevisions)
	} else {
		f.seq.noteExists(head) // fill up to it now, not after the next poll
	}
	f.polledRev = head
}

// awoken releases the creates that waited for the wake's catchUp (see waitAwake).
func (h *Hub) awoken() {
	h.headMu.Lock()
	defer h.headMu.Unlock()
	if h.waking != nil {
		close(h.waking)
		h.waking = nil
	}
}

// waitAwake waits until the feed has caught up on the first stream's wake, ctx ends or deadline passes. A
// create waits for it, so that the feed's own look at storage's revision comes before the watch exists: a
// write acknowledged after the created response then reaches the hub over the bus (with its trace), not
// through a fill that the wake's late look would start.
func (h *Hub) waitAwake(ctx context.Context, deadline time.Time) {
	h.headMu.Lock()
	waking := h.waking
	h.headMu.Unlock()
	if waking == nil {
		return
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-waking:
	case <-ctx.Done():
	case <-timer.C:
	}
}

// emptyIfUnwatched empties the window when the hub has no watch stream, and reports whether it has none. The
// head stays: the revisions above it come from the fill when a stream wakes the hub.
func (h *Hub) emptyIfUnwatched() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.streams) > 0 {
		return false
	}
	if h.win.count > 0 || len(h.win.ring) > initialWindowRing {
		h.win.reset(h.win.head)
		h.metrics.windowRevisions.Set(0)
		h.metrics.windowBytes.Set(0)
	}
	return true
}

// jumpTo moves the head forward to head, emptying the window, unless a watcher exists (it must not miss the
// revisions skipped) or the head is already there.
func (h *Hub) jumpTo(head, compactRev int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if head <= h.win.head {
		return false
	}
	for s := range h.streams {
		if len(s.watchers) > 0 {
			return false
		}
	}
	h.logger.Info("watchhub woken by a watch stream; jumping to storage's revision", "from", h.win.head, "to", head)
	h.compactRev = max(h.compactRev, compactRev)
	h.win.reset(head)
	h.headRev.Store(head)
	h.metrics.head.Set(float64(head))
	h.metrics.windowRevisions.Set(0)
	h.metrics.windowBytes.Set(0)
	h.notifyHead()
	return true
}
