package consensus

import "time"

// tickClock decides when the raft loop ticks raft, so that a follower that hears its leader does not wake every
// heartbeat interval only to tick.
//
// Ticks fall on a grid of one interval anchored at base; given counts the ticks handed to raft since base. A
// follower's ticks only count towards its election timeout, and raft sets that count back to zero whenever the
// leader's heartbeat arrives (restart moves base there; the leader heartbeats every interval). So while a follower hears its leader
// (lazy), the loop hands raft the ticks it is owed only when it wakes anyway (a message) or when the count could
// first reach the election timeout (electionTicks after base); from there on it wakes every interval, as before.
// Raft sees the ticks it would have seen, late but in order and before any message it steps: its election timer
// fires at base + (randomized timeout) intervals, which is the latest a free-running ticker would have fired it
// (one anchored anywhere within the interval before base), so a follower notices a silent leader no later than
// before and on average half an interval (50 ms by default) later.
//
// A leader or candidate (not lazy) ticks every interval, at most one tick per wake, as a time.Ticker drops the
// ticks a stalled receiver missed: a leader whose loop stalled must not run its quorum check twice in a row
// without having read its followers' answers in between.
type tickClock struct {
	interval      time.Duration
	electionTicks int
	base          time.Time
	given         int
}

// maxBurst bounds the ticks a lazy follower is handed at once, in election timeouts: two always reach raft's
// randomized timeout (less than two election timeouts), so more would only spin after a long stop.
const maxBurst = 2

func newTickClock(interval time.Duration, electionTicks int, now time.Time) *tickClock {
	return &tickClock{interval: interval, electionTicks: electionTicks, base: now}
}

// owes reports whether raft is owed a tick at now.
func (c *tickClock) owes(now time.Time) bool {
	return now.Sub(c.base) >= time.Duration(c.given+1)*c.interval
}

// due returns how many ticks raft is owed at now and counts them as given.
func (c *tickClock) due(now time.Time, lazy bool) int {
	owed := int(now.Sub(c.base)/c.interval) - c.given
	switch {
	case owed <= 0:
		return 0
	case !lazy && owed > 1:
		c.restart(now) // drop the missed ticks, as a time.Ticker does
		return 1
	case owed > maxBurst*c.electionTicks:
		c.restart(now)
		return maxBurst * c.electionTicks
	}
	c.given += owed
	return owed
}

// restart anchors the grid at now: raft has just set its election count back to zero.
func (c *tickClock) restart(now time.Time) { c.base, c.given = now, 0 }

// next returns when the loop must next wake to tick: the next grid point, and for a lazy follower not before
// its count could reach the election timeout.
func (c *tickClock) next(lazy bool) time.Time {
	ticks := c.given + 1
	if lazy {
		ticks = max(ticks, c.electionTicks)
	}
	return c.base.Add(time.Duration(ticks) * c.interval)
}
