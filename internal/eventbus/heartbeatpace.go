package eventbus

import "time"

// heartbeatPace spaces a publisher's heartbeats: every HeartbeatInterval, and every idleHeartbeatInterval once
// it has been given nothing for TakeoverAfter (an idle cluster), back to HeartbeatInterval with the next record.
// A publisher standing by in an idle cluster does not tick at all: it wakes only when its turn could come or its
// next standby heartbeat is due (standbyWake).
type heartbeatPace struct {
	cfg       PublisherConfig
	tick      *time.Ticker
	given     uint64    // the index given at the last heartbeat
	changedAt time.Time // when a heartbeat last found given changed
	idle      bool
	paused    bool        // tick is stopped: an idle standby waits on wake instead
	wake      *time.Timer // an idle standby's wake; nil until first needed
	wakeAt    time.Time   // when wake fires; zero when it is not set
}

// idleHeartbeatInterval is 2/5 of TakeoverAfter (400 ms by default): well within it, so a live publisher's turn
// is not taken while the cluster idles, at half the heartbeats.
func (c PublisherConfig) idleHeartbeatInterval() time.Duration {
	return max(c.HeartbeatInterval, c.TakeoverAfter*2/5)
}

// beat is told of each heartbeat at now, when the publisher had been given up to given.
func (h *heartbeatPace) beat(now time.Time, given uint64) {
	switch {
	case given != h.given || h.changedAt.IsZero():
		h.given, h.changedAt = given, now
		h.busy()
	case !h.idle && now.Sub(h.changedAt) >= h.cfg.TakeoverAfter:
		h.idle = true
		h.tick.Reset(h.cfg.idleHeartbeatInterval())
		h.paused = false
	}
}

// busy brings back the full pace (the publisher was given a record).
func (h *heartbeatPace) busy() {
	if h.idle {
		h.idle = false
		h.tick.Reset(h.cfg.HeartbeatInterval)
		h.paused = false
	}
}

// pause stops the ticker while an idle standby waits on standbyWake: a ticker nobody reads still wakes the
// process once it has been reset. resume starts it again at the current pace.
func (h *heartbeatPace) pause() {
	if !h.paused {
		h.tick.Stop()
		h.paused = true
	}
}

func (h *heartbeatPace) resume() {
	if h.paused {
		interval := h.cfg.HeartbeatInterval
		if h.idle {
			interval = h.cfg.idleHeartbeatInterval()
		}
		h.tick.Reset(interval)
		h.paused = false
	}
}

// standbyWake returns the channel an idle standby waits on instead of its ticker: it fires when the standby's
// turn could first come (t.nextCheck), which the sender's heartbeats keep moving later, so an idle standby wakes
// about once a TakeoverAfter instead of every idleHeartbeatInterval, and takes its turn as soon as the sender
// has been silent for TakeoverAfter. The timer is only ever moved earlier or set again after it fired: moving a
// pending timer later would leave the Go runtime a wakeup at its old time anyway.
func (h *heartbeatPace) standbyWake(t *turns) <-chan time.Time {
	at := t.nextCheck()
	switch {
	case h.wake == nil:
		h.wake = time.NewTimer(time.Until(at))
	case h.wakeAt.IsZero() || at.Before(h.wakeAt):
		h.wake.Reset(time.Until(at))
	default:
		return h.wake.C
	}
	h.wakeAt = at
	return h.wake.C
}

// stop stops the pace's timers.
func (h *heartbeatPace) stop() {
	h.tick.Stop()
	if h.wake != nil {
		h.wake.Stop()
	}
}
