package watchhub

import "fmt"

// window is the bounded run of the most recent revisions, [first, head], contiguous. Watchers that start in
// the past or fall behind read from it before they are served live; below first they read storage history.
// It evicts the oldest revisions when it holds more than maxRevs revisions or maxBytes bytes (always keeping
// the newest one).
type window struct {
	ring     []revisionEvents
	start    int // ring index of the oldest revision
	count    int
	head     int64
	bytes    int
	maxRevs  int
	maxBytes int
}

func newWindow(head int64, maxRevs, maxBytes int) *window {
	return &window{ring: make([]revisionEvents, min(maxRevs, initialWindowRing)), head: head, maxRevs: maxRevs,
		maxBytes: maxBytes}
}

// initialWindowRing is the ring's first size: it doubles as revisions come, up to maxRevs, so that a hub
// with no writes to follow does not hold maxRevs empty slots (720 KB at the default 10,000, which its heap
// goal doubles).
const initialWindowRing = 64

// first is the oldest revision held; head+1 when the window is empty.
func (w *window) first() int64 { return w.head - int64(w.count) + 1 }

// append adds the revision after head.
func (w *window) append(r revisionEvents) error {
	if r.rev != w.head+1 {
		return fmt.Errorf("window at head %d cannot append revision %d", w.head, r.rev)
	}
	for w.count > 0 && (w.count == w.maxRevs || w.bytes+r.bytes > w.maxBytes) {
		w.evictOldest()
	}
	if w.count == len(w.ring) {
		w.grow()
	}
	w.ring[(w.start+w.count)%len(w.ring)] = r
	w.count++
	w.bytes += r.bytes
	w.head = r.rev
	return nil
}

// grow doubles the ring, up to maxRevs, keeping the revisions in order from its start.
func (w *window) grow() {
	ring := make([]revisionEvents, min(2*len(w.ring), w.maxRevs))
	n := copy(ring, w.ring[w.start:])
	copy(ring[n:], w.ring[:w.start])
	w.ring, w.start = ring, 0
}

func (w *window) evictOldest() {
	w.bytes -= w.ring[w.start].bytes
	w.ring[w.start] = revisionEvents{}
	w.start = (w.start + 1) % len(w.ring)
	w.count--
}

// at returns the revision rev, if the window holds it.
func (w *window) at(rev int64) (*revisionEvents, bool) {
	if rev < w.first() || rev > w.head {
		return nil, false
	}
	return &w.ring[(w.start+int(rev-w.first()))%len(w.ring)], true
}

// reset empties the window, gives back its ring (a new one starts at initialWindowRing) and moves its head.
func (w *window) reset(head int64) {
	w.ring = make([]revisionEvents, min(w.maxRevs, initialWindowRing))
	w.start, w.count, w.bytes, w.head = 0, 0, 0, head
}
