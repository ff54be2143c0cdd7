package watchhub

import (
	"testing"
	"time"

	"github.com/cairn-kv/cairn/api/eventpb"
)

func record(rev int64) busRecord { return busRecord{rec: &eventpb.AppliedRecord{Revision: rev}} }

// TestBusQueueKeepsOrderAndBound: records come out in the order they went in, a full queue refuses one, and
// the queue's memory does not stay at a burst's size.
func TestBusQueueKeepsOrderAndBound(t *testing.T) {
	q := busQueue{ready: make(chan struct{}, 1)}
	if got := q.take(); len(got) != 0 {
		t.Fatalf("an empty queue gave %d records", len(got))
	}
	for rev := int64(1); rev <= busQueueLength; rev++ {
		if !q.push(record(rev)) {
			t.Fatalf("push %d of %d refused", rev, busQueueLength)
		}
	}
	if q.push(record(busQueueLength + 1)) {
		t.Fatal("a full queue took one more record")
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("no token after the first push")
	}
	batch := q.take()
	for i, br := range batch {
		if br.rec.Revision != int64(i+1) {
			t.Fatalf("record %d has revision %d", i, br.rec.Revision)
		}
	}
	if len(batch) != busQueueLength {
		t.Fatalf("took %d records, want %d", len(batch), busQueueLength)
	}
	if !q.push(record(1)) {
		t.Fatal("the emptied queue refused a record")
	}
	if got := q.take(); len(got) != 1 || cap(q.taken) > keptQueueCap || cap(q.pending) != 0 {
		t.Fatalf("after a burst: took %d, kept capacity %d pending and %d taken", len(got), cap(q.pending), cap(q.taken))
	}
}

// TestBusQueueConcurrent: a producer pushing while the consumer waits on ready and takes loses no record and
// reorders none (run it with -race).
func TestBusQueueConcurrent(t *testing.T) {
	const total = 50000
	q := busQueue{ready: make(chan struct{}, 1)}
	go func() {
		for rev := int64(1); rev <= total; rev++ {
			for !q.push(record(rev)) {
				time.Sleep(time.Microsecond) // full: the consumer is behind
			}
		}
	}()
	next := int64(1)
	deadline := time.After(20 * time.Second)
	for next <= total {
		select {
		case <-q.ready:
		case <-deadline:
			t.Fatalf("waited for record %d of %d: a push left no token", next, total)
		}
		for _, br := range q.take() {
			if br.rec.Revision != next {
				t.Fatalf("got revision %d, want %d", br.rec.Revision, next)
			}
			next++
		}
	}
}
