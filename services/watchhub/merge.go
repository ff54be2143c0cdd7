package watchhub

import "slices"

// Merging runs: when a stream's sender finds several live responses of one watcher waiting (the stream fell
// behind the bus), it writes them as one response, as etcd's unsynced watchers get many revisions in one
// response. Each response costs gRPC a message on the connection's one writer goroutine whatever its size,
// so under load fewer, larger messages are what lets a hub's cores, and the connections to it, carry more
// events.
//
// Merging costs no encoding: the shared parts are protobuf WatchResponses, and concatenated protobuf
// messages parse as one whose repeated fields (the events) are appended and whose header is the last part's
// (every later header field is set and the revision only grows). A merged response carries its revisions in
// order, after everything queued before the first of them for that watcher and before everything queued after
// the last.

// Merge limits: at most etcd's revisions per batch, and no larger than a fragment.
const mergeMaxResponses = watchBatchMaxRevs

// mergeable reports whether a frame may merge with others of its watcher: a live response in one part, not
// sampled (a sampled event keeps its own message, so its send span and relay carrier stay its own), for a
// watcher that did not ask for fragments (their sizes are etcd's to cut).
func (f *frame) mergeable() bool {
	return f.shared != nil && len(f.shared.boxed) == 1 && f.shared.traced == nil && !f.w.spec.fragment
}

// runMerger is a sender's state for mergeRuns: its run counter, and the runs it merged in the frames it
// is writing.
type runMerger struct {
	epoch uint64
	runs  []mergedRun
	later []*sharedResponse // every run's later responses, run after run
}

// mergedRun is a run of one watcher's live responses written as one: the bytes of all of them, and where the
// responses after its first frame's are in runMerger.later.
type mergedRun struct {
	bytes        int
	first, count int
}

// What a sender keeps room for between writes: runs, and their later responses. A burst that needed more
// gets one allocation of its size.
const (
	keptRuns  = 256
	keptLater = 1024
)

// more is what mergeRuns merged into f: the later live responses written with f's.
func (m *runMerger) more(f *frame) []*sharedResponse {
	if f.run == 0 || f.merged {
		return nil
	}
	r := &m.runs[f.run-1]
	return m.later[r.first : r.first+r.count : r.first+r.count]
}

// reset forgets the runs once their frames are written, so that they pin no response.
func (m *runMerger) reset() {
	m.runs, m.later = keepCap(m.runs, keptRuns), keepCap(m.later, keptLater)
}

// mergeRuns merges each watcher's consecutive live responses in o into the first of them (a run of m's),
// leaving the others marked merged. A watcher's run ends at any other frame of that watcher (created,
// canceled, progress, catch-up) and every run ends at a frame for the whole stream, so nothing is reordered
// across them. m.epoch is the sender's run counter: a watcher's run is open while its runEpoch is the counter's
// value, and its head frame is runHead, so following runs costs no map (a map insert per frame was a seventh of
// a sender's time with 100 watchers of a key on a stream). Moving the counter on closes every run, so runs
// never carry over from one call to the next. Call reset once the frames are written.
//
// The first pass decides the runs and counts them; the second lays their later responses out in m.later, one
// run after another, so that a take costs at most one allocation however many runs it merges.
func (m *runMerger) mergeRuns(o *outbox, maxBytes int) {
	m.epoch++
	for c := o.head; c != nil; c = c.next {
		for i := range c.n {
			f := &c.frames[i]
			switch {
			case f.w == nil:
				m.epoch++
			case !f.mergeable():
				f.w.runEpoch = 0
			default:
				w := f.w
				if w.runEpoch == m.epoch && m.extend(w.runHead, f.shared, maxBytes) {
					f.run, f.merged = w.runHead.run, true
					continue
				}
				w.runEpoch, w.runHead = m.epoch, f
			}
		}
	}
	if len(m.runs) == 0 {
		return
	}
	total := 0
	for i := range m.runs {
		r := &m.runs[i]
		r.first, total, r.count = total, total+r.count, 0
	}
	m.later = slices.Grow(m.later[:0], total)[:total]
	for c := o.head; c != nil; c = c.next {
		for i := range c.n {
			if f := &c.frames[i]; f.merged {
				r := &m.runs[f.run-1]
				m.later[r.first+r.count] = f.shared
				r.count++
			}
		}
	}
}

// extend counts resp into the run headed by head, unless that would pass the limits.
func (m *runMerger) extend(head *frame, resp *sharedResponse, maxBytes int) bool {
	if head.run == 0 {
		if head.shared.bytes+resp.bytes > maxBytes {
			return false
		}
		m.runs = append(m.runs, mergedRun{bytes: head.shared.bytes})
		head.run = int32(len(m.runs))
	}
	r := &m.runs[head.run-1]
	if r.count >= mergeMaxResponses-1 || r.bytes+resp.bytes > maxBytes {
		return false
	}
	r.count++
	r.bytes += resp.bytes
	return true
}
