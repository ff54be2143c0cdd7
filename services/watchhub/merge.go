package watchhub

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

// mergeRuns merges each watcher's consecutive live responses among frames into the first of them (its more
// list), leaving the others marked merged. A watcher's run ends at any other frame of that watcher (created,
// canceled, progress, catch-up) and every run ends at a frame for the whole stream, so nothing is reordered
// across them. epoch is the sender's run counter: a watcher's run is open while its runEpoch is the counter's
// value, and its head frame is runHead, so following runs costs no map (a map insert per frame was a seventh of
// a sender's time with 100 watchers of a key on a stream). Moving the counter on closes every run, so runs
// never carry over from one call to the next.
func mergeRuns(frames []frame, epoch *uint64, maxBytes int) {
	*epoch++
	for i := range frames {
		f := &frames[i]
		switch {
		case f.w == nil:
			*epoch++
		case !f.mergeable():
			f.w.runEpoch = 0
		default:
			w := f.w
			if w.runEpoch == *epoch {
				h := &frames[w.runHead]
				if len(h.more) < mergeMaxResponses-1 && h.mergedBytes+f.shared.bytes <= maxBytes {
					h.more = append(h.more, f.shared)
					h.mergedBytes += f.shared.bytes
					f.merged = true
					continue
				}
			}
			w.runEpoch, w.runHead = *epoch, i
			f.mergedBytes = f.shared.bytes
		}
	}
}
