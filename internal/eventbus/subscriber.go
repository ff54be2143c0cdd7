package eventbus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/eventpb"
)

// Confirm waits, up to wait, until the NATS server has processed everything nc has sent, its subscriptions
// included: a record published after Confirm returns nil reaches them. A subscriber that reads the store's
// position after subscribing confirms first, so that no record between that position and its subscription
// is lost on the bus. It uses the context form of Flush, which is safe in a synctest bubble.
func Confirm(ctx context.Context, nc *nats.Conn, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("nats server did not confirm the subscriptions within %v: %w", wait, err)
	}
	return nil
}

// Handler receives each record as it arrives, from one goroutine per subscription, in arrival order.
type Handler func(rec *eventpb.AppliedRecord, meta Meta)

// Subscribe delivers every member's records under prefix to handle until the subscription is unsubscribed.
// Records that do not decode are skipped. NATS drops messages for a handler that falls too far behind (a
// slow consumer): the caller must treat the bus as lossy.
func Subscribe(nc *nats.Conn, prefix string, handle Handler) (*nats.Subscription, error) {
	return subscribe(nc, AllSubjects(prefix), handle, nil, nil, decodeBatch)
}

// SubscribeFirstCopies is Subscribe for a consumer that needs each log index once: members publish the same
// records (one at a time when they take turns, several while turns change, all when they do not), and only the
// first copy of a recent index to arrive is handed on. A message whose every
// index (from the first and last index in its headers) was already handed on is not even decoded. A copy of
// an index too old to be remembered is handed on again, so the consumer must still tolerate the odd duplicate.
//
// A consumer that needs the records only at times (a watchhub, while it has watch streams) passes wanted: a
// message that arrives while it reports false is dropped undecoded, and its indexes are not remembered as handed
// on, so a later copy of them is. wanted is called on the subscription's goroutine for every message and must be
// cheap (an atomic load); nil wants every message.
func SubscribeFirstCopies(nc *nats.Conn, prefix string, wanted func() bool, handle Handler) (*nats.Subscription, error) {
	return subscribe(nc, AllSubjects(prefix), handle, wanted, newRecentIndexes(), decodeBatch)
}

// SubscribeLeaseChanges is SubscribeFirstCopies for a consumer of lease changes only (a leasekeeper), on the lease
// subjects: it gets each record that changes a lease once, with its member, index, term, revision and lease
// changes and nothing else (no events, alarms or trace), and in between, at most every leasePositionInterval
// while the store changes, a record without lease changes that says how far it has got. Records that change no
// lease are not otherwise sent there, which spares a leasekeeper the events that make up most of the bus.
func SubscribeLeaseChanges(nc *nats.Conn, prefix string, handle Handler) (*nats.Subscription, error) {
	return subscribe(nc, AllLeaseSubjects(prefix), handle, nil, newRecentIndexes(), decodeLeaseBatch)
}

// decodeBatch decodes a whole message.
func decodeBatch(data []byte) ([]*eventpb.AppliedRecord, error) {
	var batch eventpb.AppliedBatch
	if err := proto.Unmarshal(data, &batch); err != nil {
		return nil, err
	}
	return batch.Records, nil
}

// decodeLeaseBatch decodes a lease subject's message (eventpb.LeaseBatch) into records with only the lease fields.
func decodeLeaseBatch(data []byte) ([]*eventpb.AppliedRecord, error) {
	var batch eventpb.LeaseBatch
	if err := proto.Unmarshal(data, &batch); err != nil {
		return nil, err
	}
	out := make([]*eventpb.AppliedRecord, len(batch.Records))
	for i, r := range batch.Records {
		out[i] = &eventpb.AppliedRecord{MemberId: r.MemberId, Index: r.Index, Term: r.Term, Revision: r.Revision, Leases: r.Leases}
	}
	return out, nil
}

// subscribe hands the records of subject's messages to handle; a nil wanted wants every message, a nil seen
// hands on every copy.
func subscribe(nc *nats.Conn, subject string, handle Handler, wanted func() bool, seen *recentIndexes,
	decode func([]byte) ([]*eventpb.AppliedRecord, error)) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(subject, func(msg *nats.Msg) {
		if wanted != nil && !wanted() {
			return
		}
		h := headersOf(msg.Header)
		if seen != nil && seen.allSeen(h.first, h.last) {
			return
		}
		records, err := decode(msg.Data)
		if err != nil {
			return
		}
		for _, rec := range records {
			if seen != nil && !seen.first(rec.Index) {
				continue
			}
			handle(rec, Meta{Index: rec.Index, Revision: rec.Revision, Member: h.member, Trace: rec.Trace})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", subject, err)
	}
	// Generous pending limits: a hub catching up briefly should not be cut off; beyond them NATS drops.
	if err := sub.SetPendingLimits(1<<20, 1<<30); err != nil {
		return nil, fmt.Errorf("pending limits for %s: %w", subject, err)
	}
	return sub, nil
}

// recentIndexWindow is how many recent indexes recentIndexes remembers: far more than the members drift
// apart on the bus.
const recentIndexWindow = 1 << 14

// recentIndexes remembers which of the recent log indexes were seen, in a ring keyed by index. It is used
// from the subscription's one handler goroutine only.
type recentIndexes struct{ ring []uint64 }

func newRecentIndexes() *recentIndexes {
	return &recentIndexes{ring: make([]uint64, recentIndexWindow)}
}

// allSeen reports whether every index from first to last was seen; it remembers nothing.
func (r *recentIndexes) allSeen(first, last uint64) bool {
	if first == 0 || last < first || last-first >= recentIndexWindow {
		return false
	}
	for index := first; index <= last; index++ {
		if r.ring[index%recentIndexWindow] != index {
			return false
		}
	}
	return true
}

// first reports whether index is seen for the first time (index 0, unknown, always is) and remembers it.
func (r *recentIndexes) first(index uint64) bool {
	if index == 0 {
		return true
	}
	slot := &r.ring[index%recentIndexWindow]
	if *slot == index {
		return false
	}
	*slot = index
	return true
}
