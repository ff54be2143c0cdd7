package watchhub

import (
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// revisionEvents is one store revision as the hub holds it: every event of the write that produced it, in
// order, with PrevKv where the key existed before. It is immutable once built; watchers share it.
type revisionEvents struct {
	rev    int64
	events []*mvccpb.Event
	// traced is the event's trace, when the revision came over the bus with a sampled trace context.
	traced *eventTrace
	// received is when the hub got the revision, for the delivery latency metric.
	received time.Time
	// bytes is the encoded size of the events.
	bytes int
}

func newRevisionEvents(rev int64, events []*mvccpb.Event, traced *eventTrace, received time.Time) revisionEvents {
	size := 0
	for _, ev := range events {
		size += proto.Size(ev)
	}
	return revisionEvents{rev: rev, events: events, traced: traced, received: received, bytes: size}
}

// sequencer turns revisions that arrive in any order, any number of times, from the bus and from storage
// history, into the contiguous run the hub delivers: each revision once, in order, none skipped. It does no
// I/O; its owner asks it what is missing and fetches that from storage.
//
// Invariants: every revision below next has been handed out exactly once; pending holds only revisions above
// next; known is the highest revision known to exist (from any record or storage status).
type sequencer struct {
	next       int64
	known      int64
	pending    map[int64]revisionEvents
	maxPending int
}

// newSequencer starts after head: the first revision it hands out is head+1.
func newSequencer(head int64, maxPending int) *sequencer {
	return &sequencer{next: head + 1, known: head, pending: map[int64]revisionEvents{}, maxPending: maxPending}
}

// offerResult says what became of an offered revision.
type offerResult int

const (
	offerDelivered offerResult = iota // it was next, and is handed out with whatever it unblocked
	offerDuplicate                    // already handed out or already pending
	offerEarly                        // ahead of a gap; held until the gap is filled
	offerDropped                      // ahead of a gap, and too many are held already; it will be fetched again
)

// offer takes one revision and returns the run of revisions, in order, that can now be handed out.
func (s *sequencer) offer(r revisionEvents) ([]revisionEvents, offerResult) {
	if r.rev < s.next {
		return nil, offerDuplicate
	}
	s.noteExists(r.rev)
	if r.rev > s.next {
		if _, held := s.pending[r.rev]; held {
			return nil, offerDuplicate
		}
		if len(s.pending) >= s.maxPending {
			return nil, offerDropped
		}
		s.pending[r.rev] = r
		return nil, offerEarly
	}
	run := []revisionEvents{r}
	s.next++
	for {
		p, ok := s.pending[s.next]
		if !ok {
			break
		}
		delete(s.pending, s.next)
		run = append(run, p)
		s.next++
	}
	return run, offerDelivered
}

// noteExists records that the store has reached rev (a record without events, or a storage status).
func (s *sequencer) noteExists(rev int64) {
	if rev > s.known {
		s.known = rev
	}
}

// missing returns the first interval of revisions known to exist that is neither handed out nor held.
func (s *sequencer) missing() (from, to int64, ok bool) {
	if s.known < s.next {
		return 0, 0, false
	}
	to = s.known
	for rev := range s.pending {
		if rev-1 < to {
			to = rev - 1
		}
	}
	return s.next, to, true
}

// dropPending lets go of the revisions held ahead of a gap: they stay known to exist, so missing reports them
// with the gap, to be read again.
func (s *sequencer) dropPending() {
	if len(s.pending) > 0 {
		s.pending = map[int64]revisionEvents{}
	}
}

// head is the last revision handed out.
func (s *sequencer) head() int64 { return s.next - 1 }

// skipTo abandons every revision below rev (they were compacted away before the hub could read them): the
// next revision handed out is rev.
func (s *sequencer) skipTo(rev int64) {
	if rev <= s.next {
		return
	}
	s.next = rev
	for p := range s.pending {
		if p < rev {
			delete(s.pending, p)
		}
	}
	s.noteExists(rev - 1)
}
