package watchhub

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// Bounded lag. A watcher is behind while revisions it has not been sent have reached the hub; its lag is the
// age of the oldest of them, counted from when that revision reached the hub or, for a watch created later
// (one that starts in the past), from the watch's creation. A watcher whose lag passes Config.MaxWatchLag is
// canceled with wiremsg.LagCancelReason (compact_revision 0) instead of being served later still: its client
// re-watches from its next revision (client/v3 ends the watch channel; a Kubernetes reflector re-watches from
// its last resource version), and the hub's work for it stops, so the watchers that keep up stay within the
// bound when the hub has more watchers than it can serve. A watcher whose next revision is compacted is
// canceled with compact_revision as before (catch-up reads that first).
//
// The bound is checked where a watcher is served: before the sender writes a live response (its revision's
// arrival is on the response) and before each catch-up step (the arrival of the cohort's next revision is in
// the window; below the window, the window's oldest arrival bounds it from below). So every response written
// is within the bound when the sender took it, and the hub costs nothing more per event than a clock read.

// lagPolicy is the hub's clock and bound for watchers that cannot keep up.
type lagPolicy struct {
	epoch    time.Time // the hub's clock starts here: watcher.created is a duration since
	bound    time.Duration
	lastWarn atomic.Int64 // hub clock of the last warning logged, so that mass cancels log once a second
}

// clock is the time since the hub started (monotonic).
func (h *Hub) clock() time.Duration { return time.Since(h.lag.epoch) }

// lagOf is w's lag at now when the oldest revision it has not been sent reached the hub at arrived; an
// unknown arrival (zero) is no lag.
func (h *Hub) lagOf(w *watcher, arrived, now time.Time) time.Duration {
	if arrived.IsZero() {
		return 0
	}
	return now.Sub(h.lag.epoch) - h.lagStart(w, arrived)
}

// lagStart is when w's lag started, on the hub's clock, given the arrival of the oldest revision it has not
// been sent: that arrival or, if later, w's creation.
func (h *Hub) lagStart(w *watcher, arrived time.Time) time.Duration {
	return max(arrived.Sub(h.lag.epoch), w.created)
}

// lagStamp is the stamp of a response to w whose oldest revision reached the hub at arrived, for a frontend
// that relays it (wiremsg.Batch.Stamp): the start of w's lag in nanoseconds of the hub's clock, at least 1; 0,
// no stamp, for an unknown arrival. The frontend holds the bound on what waits in the relay's buffers with it:
// it compares stamps with its own clock, so the hub's epoch, and its wall clock, do not matter to it.
func (h *Hub) lagStamp(w *watcher, arrived time.Time) uint64 {
	if arrived.IsZero() {
		return 0
	}
	return uint64(max(h.lagStart(w, arrived), 1))
}

// arrivalOf is when revision rev reached the hub: from the window, or the window's oldest arrival for a
// revision below it (a lower bound on its age); zero above the head. Hub.mu is held (shared).
func (h *Hub) arrivalOf(rev int64) time.Time {
	if rev > h.win.head || h.win.count == 0 {
		return time.Time{}
	}
	r, ok := h.win.at(max(rev, h.win.first()))
	if !ok {
		return time.Time{}
	}
	return r.received
}

// overdue reports whether a live response is past w's bound at now; one that is not counts in the lag
// histogram. It runs on the sender, just before the response is written.
func (s *stream) overdue(w *watcher, shared *sharedResponse, now time.Time) bool {
	if shared.received.IsZero() {
		return false
	}
	lag := s.hub.lagOf(w, shared.received, now)
	if lag > s.hub.lag.bound {
		return true
	}
	s.stats.lag.Observe(lag.Seconds())
	return false
}

// dropLagging cancels the members of a catching-up cohort whose lag is past the bound, given when the
// cohort's next revision arrived; the others count in the lag histogram.
func (s *stream) dropLagging(c *cohort, arrived time.Time) error {
	now := time.Now()
	var late []*watcher
	for _, w := range c.members {
		lag := s.hub.lagOf(w, arrived, now)
		if lag > s.hub.lag.bound {
			late = append(late, w)
			continue
		}
		s.stats.lag.Observe(lag.Seconds())
	}
	if len(late) == 0 {
		return nil
	}
	return s.cancelLagging(late)
}

// cancelLagging removes watchers that passed the bound and tells their client why: canceled, with
// wiremsg.LagCancelReason and a header at the head. It runs on the sender, so nothing queued for them before is
// lost and nothing after is written.
func (s *stream) cancelLagging(ws []*watcher) error {
	h := s.hub
	h.mu.Lock()
	var told []*watcher
	for _, w := range ws {
		if !w.canceled.Load() {
			h.removeWatcher(w)
			told = append(told, w)
		}
	}
	header := h.responseHeader(h.win.head)
	h.mu.Unlock()
	if len(told) == 0 {
		return nil
	}
	h.metrics.lag.canceled.Add(float64(len(told)))
	if now, last := h.clock(), h.lag.lastWarn.Load(); now-time.Duration(last) > time.Second &&
		h.lag.lastWarn.CompareAndSwap(last, int64(now)) {
		h.logger.Warn("watchers canceled: more than --max-watch-lag behind the head", "watchers", len(told),
			"max_watch_lag", h.lag.bound, "head", header.Revision)
	}
	reason := wiremsg.LagCancelReason(h.lag.bound)
	for _, w := range told {
		if err := s.sendResponse(&pb.WatchResponse{Header: header, WatchId: w.id, Canceled: true,
			CancelReason: reason}); err != nil {
			return err
		}
	}
	return nil
}

// lagMetrics say how far behind the watchers are served and how many were canceled for lag (with
// etcd_debugging_mvcc_slow_watcher_total, the watchers catching up).
type lagMetrics struct {
	observed *obs.BatchedHistogram // observed by each stream's sender through its sendStats
	canceled prometheus.Counter
}

func newLagMetrics(registry *prometheus.Registry) lagMetrics {
	m := lagMetrics{
		observed: obs.NewBatchedHistogram(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "watchhub",
			Name: "watch_lag_seconds", Help: "How far behind the head a watcher was when served (a live response " +
				"written, or a catch-up step): the age of the oldest revision it had not been sent.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		canceled: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "watchhub",
			Name: "watchers_lag_canceled_total", Help: "Watchers canceled for falling more than --max-watch-lag behind the head."}),
	}
	registry.MustRegister(m.observed, m.canceled)
	return m
}
