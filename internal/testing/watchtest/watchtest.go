// Package watchtest follows etcd watchers that must each receive every revision of a write stream exactly
// once and in order: the check of the watch fault tests, shared by the in-process and the cairn up suites.
package watchtest

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watchers is a set of prefix watchers started at one revision; each records the revision it expects next.
type Watchers struct {
	mu       sync.Mutex
	next     []int64
	failures []string
}

// Start opens perClient watches of prefix from revision start on each client (watchers are numbered client
// by client) and follows them until ctx ends.
func Start(ctx context.Context, clients []*clientv3.Client, perClient int, prefix string, start int64) *Watchers {
	w := &Watchers{next: make([]int64, len(clients)*perClient)}
	for i, c := range clients {
		for j := range perClient {
			n := i*perClient + j
			w.next[n] = start
			wch := c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(start))
			go w.follow(n, wch)
		}
	}
	return w
}

func (w *Watchers) follow(n int, wch clientv3.WatchChan) {
	for resp := range wch {
		w.mu.Lock()
		if err := resp.Err(); err != nil {
			w.failures = append(w.failures, fmt.Sprintf("watcher %d: %v", n, err))
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != w.next[n] {
				w.failures = append(w.failures, fmt.Sprintf("watcher %d: revision %d, want %d", n, ev.Kv.ModRevision, w.next[n]))
			}
			w.next[n] = ev.Kv.ModRevision + 1
		}
		w.mu.Unlock()
	}
}

// Done reports whether every watcher has passed revision last, or some watcher has failed: the condition
// to wait for before calling Err.
func (w *Watchers) Done(last int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failures) > 0 {
		return true
	}
	for _, n := range w.next {
		if n <= last {
			return false
		}
	}
	return true
}

// Err describes the failures seen so far (an error, a gap, a duplicate or a reordering), nil if none.
func (w *Watchers) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failures) > 0 {
		return fmt.Errorf("%d watch failures, first: %s", len(w.failures), w.failures[0])
	}
	return nil
}

// ErrUnlessAt is Err, or an error naming a watcher whose next expected revision is not last+1.
func (w *Watchers) ErrUnlessAt(last int64) error {
	if err := w.Err(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for n, rev := range w.next {
		if rev != last+1 {
			return fmt.Errorf("watcher %d expects revision %d next, want %d", n, rev, last+1)
		}
	}
	return nil
}
