package eventbus

import (
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Election defaults (see PublisherConfig).
const (
	DefaultHeartbeatInterval = 200 * time.Millisecond
	DefaultTakeoverAfter     = time.Second
	DefaultStandbyRecords    = 8192
)

// turns decides, for one publisher that takes turns with the other members' (PublisherConfig.TakeTurns),
// whether it sends now. A publisher in its turn sends a heartbeat each HeartbeatInterval (less often while
// idle: see heartbeatPace) with the last index it was given; one standing by sends a standby heartbeat (marked
// HeaderStandby) only every standbyHeartbeatInterval. It is a publisher's turn unless it heard, from a lower
// member ID whose index was not behind (had reached what this publisher had been given TakeoverAfter earlier),
// a heartbeat within TakeoverAfter or a standby heartbeat within standbyWindow. So the lowest live member sends,
// and one whose storage stopped applying (cut off from its consensus, say) loses its turn once the others are
// TakeoverAfter ahead of it.
//
// Why standbys beat rarely, and why they beat at all: only the sender's heartbeats keep the others standing by,
// so only it beats at the full pace (an idle bus carries a third of the heartbeats it did when every member beat
// each HeartbeatInterval). When the sender goes silent, the next member takes over within TakeoverAfter, as
// before; a member above that one must not take over too, and its standby heartbeats are what tell it the next
// one is there. When the sender and the next member are gone together, the third so takes over within
// standbyWindow instead of TakeoverAfter.
type turns struct {
	memberID uint64
	takeover time.Duration
	given    atomic.Uint64 // the last index handed to the publisher
	// behindMark is the index given TakeoverAfter ago: a heartbeat below it is from a member lagging behind.
	behindMark atomic.Uint64
	lowerSeen  atomic.Int64 // Unix nanoseconds of the last heartbeat of a lower member not behind, in its turn
	// lowerStandbySeen is the same for a lower member standing by.
	lowerStandbySeen atomic.Int64
	lastStandbyBeat  time.Time // when this publisher last sent a standby heartbeat; its goroutine only
	samples          []givenAt // recent values of given, oldest first; the publisher's goroutine only
	sub              *nats.Subscription
}

// standbyHeartbeatInterval is how often a publisher standing by sends a heartbeat: twice TakeoverAfter (2 s by
// default). standbyWindow is how long one keeps the publishers above it standing by: five times TakeoverAfter,
// so that two heartbeats may be late or lost.
func (t *turns) standbyHeartbeatInterval() time.Duration { return 2 * t.takeover }
func (t *turns) standbyWindow() time.Duration            { return 5 * t.takeover }

type givenAt struct {
	at    time.Time
	index uint64
}

// watch subscribes to the heartbeats of prefix's publishers.
func (t *turns) watch(nc *nats.Conn, prefix string) error {
	sub, err := nc.Subscribe(HeartbeatSubject(prefix), func(msg *nats.Msg) {
		h := headersOf(msg.Header)
		if h.member >= t.memberID || h.last < t.behindMark.Load() {
			return
		}
		if msg.Header.Get(HeaderStandby) != "" {
			t.lowerStandbySeen.Store(time.Now().UnixNano())
		} else {
			t.lowerSeen.Store(time.Now().UnixNano())
		}
	})
	t.sub = sub
	return err
}

// tick records how far the publisher has been given at now and moves behindMark.
func (t *turns) tick(now time.Time) {
	t.samples = append(t.samples, givenAt{now, t.given.Load()})
	i := 0
	for i+1 < len(t.samples) && now.Sub(t.samples[i+1].at) >= t.takeover {
		i++
	}
	t.samples = t.samples[i:]
	if now.Sub(t.samples[0].at) >= t.takeover {
		t.behindMark.Store(t.samples[0].index)
	}
}

// mine reports whether it is this publisher's turn at now.
func (t *turns) mine(now time.Time) bool {
	return now.UnixNano()-t.lowerSeen.Load() >= int64(t.takeover) &&
		now.UnixNano()-t.lowerStandbySeen.Load() >= int64(t.standbyWindow())
}

// nextCheck returns when it could next matter to look at the turn of a publisher standing by: when, hearing
// nothing more, it would be its turn (no lower member's heartbeat for TakeoverAfter nor standby heartbeat for
// standbyWindow), or when its next standby heartbeat is due, whichever comes first.
func (t *turns) nextCheck() time.Time {
	turn := time.Unix(0, max(t.lowerSeen.Load()+int64(t.takeover), t.lowerStandbySeen.Load()+int64(t.standbyWindow())))
	if t.lastStandbyBeat.IsZero() {
		return time.Unix(0, 0) // its first standby heartbeat is due at once
	}
	if beat := t.lastStandbyBeat.Add(t.standbyHeartbeatInterval()); beat.Before(turn) {
		return beat
	}
	return turn
}

// beatDue reports whether a heartbeat is due at a tick at now: at every tick in this publisher's turn, and every
// standbyHeartbeatInterval while it stands by.
func (t *turns) beatDue(now time.Time, mine bool) bool {
	if mine {
		return true
	}
	if now.Sub(t.lastStandbyBeat) < t.standbyHeartbeatInterval() {
		return false
	}
	t.lastStandbyBeat = now
	return true
}

func (t *turns) stop() {
	if t.sub != nil {
		_ = t.sub.Unsubscribe()
	}
}

// standbyRing holds the newest records a publisher not in its turn was given, so that when its turn comes it
// sends what the previous publisher may not have (consumers drop the copies they already have).
type standbyRing struct {
	held []queued
	next int // where the next record goes once held is full
	full bool
}

func newStandbyRing(n int) *standbyRing { return &standbyRing{held: make([]queued, 0, n)} }

func (r *standbyRing) add(batch []queued) {
	for _, q := range batch {
		if !r.full {
			r.held = append(r.held, q)
			r.full = len(r.held) == cap(r.held)
			continue
		}
		r.held[r.next] = q
		r.next = (r.next + 1) % len(r.held)
	}
}

// take returns what the ring holds, oldest first, and empties it.
func (r *standbyRing) take() []queued {
	out := append(append([]queued(nil), r.held[r.next:]...), r.held[:r.next]...)
	clear(r.held)
	r.held, r.next, r.full = r.held[:0], 0, false
	return out
}
