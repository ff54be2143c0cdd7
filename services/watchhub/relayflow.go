package watchhub

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// Relay flow. A frontend that acknowledges batches (wiremsg.RelayBatchAcked) tells the hub how many it has
// written out to its client, and the sender keeps only a few beyond that: what its client has not taken yet
// then waits here, in the stream's queue, rather than in the buffers between hub and client (the hub's write
// quota, the relay's window and the frontend's write quota, 64 KiB each per stream). Here it is checked against
// the lag bound, and once a watcher has fallen behind it goes into catch-up, where each response carries all
// of its waiting revisions: a relay that cannot keep up gets fewer, fuller responses, not more one-event ones,
// and a backlog of one-event responses aging in buffers beyond the hub's check no longer holds the bound's
// whole margin (about 1,000 responses per 64 KiB, seconds of one stream's responses when 1,000 streams share a
// relay).
//
// How many may be unacknowledged follows the stream's pace: as many as the frontend acknowledged in the last
// relayFlowWindow, and at least relayFlowMinBatches. So a fast stream keeps its throughput (a window's worth in
// flight) and a slow one holds about a window's worth of its client's pace, while the queue behind both stays
// at the hub.

// relayFlowMinBatches is the fewest batches a stream may have unacknowledged, whatever its pace: as many as
// a frontend may write before it acknowledges them.
const relayFlowMinBatches = wiremsg.RelayAckEvery

// relayFlowWindow is the span of acknowledgments that sets how many batches may be unacknowledged.
const relayFlowWindow = 250 * time.Millisecond

// relayFlow counts a relayed stream's batches sent and acknowledged.
type relayFlow struct {
	sent  atomic.Uint64 // batches sent; the sender's
	acked atomic.Uint64 // batches the frontend acknowledged, from the request reader
	// stuck: no acknowledgment can arrive, and the sender sends without waiting (as before acknowledgments).
	// Either the request reader waits for the stream's handler to take a request, and the handler may wait on
	// the sender (a create waits for a control slot, which the sender frees as it writes); or the frontend has
	// closed its side of the stream (its client half-closed, as etcd's gateway does after its requests), and
	// its client still reads.
	stuck atomic.Bool
	wake  chan struct{} // signaled on an acknowledgment or when the reader is stuck
	// Sender only: the acknowledgments of the current window (from ackedAt, ending at windowEnd) and the
	// count of the last whole one.
	windowEnd time.Time
	ackedAt   uint64
	lastCount uint64
}

func newRelayFlow() *relayFlow { return &relayFlow{wake: make(chan struct{}, 1)} }

// ack records that the frontend has written the first n batches; from the request reader.
func (f *relayFlow) ack(n uint64) {
	for {
		old := f.acked.Load()
		if n <= old {
			return
		}
		if f.acked.CompareAndSwap(old, n) {
			break
		}
	}
	f.signal()
}

// setStuck records whether the request reader waits on the stream's handler.
func (f *relayFlow) setStuck(stuck bool) {
	f.stuck.Store(stuck)
	if stuck {
		f.signal()
	}
}

func (f *relayFlow) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// limit is how many batches may be unacknowledged at now; sender only.
func (f *relayFlow) limit(now time.Time) uint64 {
	if !now.Before(f.windowEnd) {
		acked := f.acked.Load()
		if now.Sub(f.windowEnd) < relayFlowWindow { // the window just ended: its count holds
			f.lastCount = acked - f.ackedAt
		} else { // no batch was sent for a whole window: nothing known of the pace
			f.lastCount = 0
		}
		f.ackedAt, f.windowEnd = acked, now.Add(relayFlowWindow)
	}
	return max(relayFlowMinBatches, f.lastCount)
}

// open reports whether another batch may be sent now; sender only.
func (f *relayFlow) open(now time.Time) bool {
	sent := f.sent.Load()
	return sent-min(f.acked.Load(), sent) < f.limit(now) || f.stuck.Load()
}

// wait returns once another batch may be sent, or with ctx's error, and reports whether it had to wait;
// sender only. The sender waits here before it takes its queue, so that what its client has not taken stays
// queued, where it merges and is checked against the lag bound when it is taken, rather than in a taken set
// written batch by batch as acknowledgments come.
func (f *relayFlow) wait(ctx context.Context, closed <-chan struct{}) (waited bool, err error) {
	for !f.open(time.Now()) {
		waited = true
		select {
		case <-f.wake:
		case <-closed:
			return waited, errStreamEnded
		case <-ctx.Done():
			return waited, ctx.Err()
		}
	}
	return waited, nil
}

// await returns once another batch may be sent, or with ctx's error, and reports whether it had to wait;
// sender only. It counts the batch as sent.
func (f *relayFlow) await(ctx context.Context, closed <-chan struct{}) (waited bool, err error) {
	waited, err = f.wait(ctx, closed)
	if err == nil {
		f.sent.Add(1)
	}
	return waited, err
}
