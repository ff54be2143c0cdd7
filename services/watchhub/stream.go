package watchhub

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/mem"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// etcd's watch IDs: 0 in a create request asks the server to choose; -1 answers for the whole stream.
const (
	autoWatchID    int64 = 0
	invalidWatchID int64 = -1
)

// ctrlSlots bounds the control responses (created, progress; a cancel's answer is bounded by the creates) a
// stream's requests may have waiting; past it the stream stops reading requests until the sender catches up,
// as etcd's ctrlStream does.
const ctrlSlots = 64

// watcherState is where a watcher is in its life; it changes only under Hub.mu.
type watcherState uint8

const (
	stateNone       watcherState = iota // not registered (canceled, or its stream ended)
	stateSynced                         // in a group: served live from the bus
	stateCatchingUp                     // behind the head: its stream's sender reads the window or storage history
	stateCompacted                      // told its start revision is compacted; waits for the client's cancel
	numWatcherStates
)

func (s watcherState) String() string {
	return [...]string{"none", "synced", "catching_up", "compacted"}[s]
}

// watcher is one watch on one stream. It is kept small: an idle watcher costs its struct, its key and a map
// entry.
type watcher struct {
	id             int64
	idField        watchIDField // the encoded watch_id field of its shared responses
	stream         *stream
	spec           watchSpec
	startRev       int64 // as requested; 0 means from now
	minRev         int64 // the first revision it may receive live (above head for a watch from the future)
	progressNotify bool
	created        time.Duration // when the watch was created, on the hub's clock (lag.go)

	// Guarded by Hub.mu.
	state watcherState
	group *group
	slot  int

	// Set by the fan-out's shard goroutine when w's stream could not take a response of the run it is
	// dispatching (the revision), cleared once w moved to catch-up (fanout.go); Hub.mu is held throughout.
	behindFrom int64

	// Guarded by stream.mu: responses queued and not yet taken by the sender.
	queued int32

	// Owned by the stream's sender goroutine.
	nextRev    int64     // while catching up: the next revision to send
	sentEvents bool      // events were written since the last progress tick
	retryAt    time.Time // while catching up: storage failed; try again then
	runEpoch   uint64    // mergeRuns: w's run of live responses is open while this is the sender's epoch,
	runHead    *frame    // and starts at this frame

	canceled atomic.Bool
}

// frame is one thing queued for a stream's sender: a group's live response for a watcher, or a control frame.
// Live frames are most of what a stream queues under load (a watcher may have WatcherBufferResponses waiting),
// so a frame is kept at 32 bytes and what only control frames need is behind ctl.
type frame struct {
	w      *watcher
	shared *sharedResponse // a group's live response for w
	ctl    *controlFrame   // otherwise
	// run is set by mergeRuns on the frames of a run it merged: 1 + the run's index in the sender's
	// runMerger, which holds the later live responses of w written with the run's first frame.
	run     int32
	counted bool // counts in w.queued
	merged  bool // set by mergeRuns: this frame's response went out with an earlier one
}

// controlFrame is a response written as it is (created, canceled, progress), or a watcher's move to catch-up.
type controlFrame struct {
	resp        *pb.WatchResponse
	catchUpFrom int64 // > 0: w fell behind here and catches up from it
	slot        bool  // resp holds one of the stream's control slots
}

// stream is one Watch RPC: the requests it reads, the watchers it carries and the sender goroutine that
// writes their responses in order.
type stream struct {
	hub   *Hub
	srv   pb.Watch_WatchServer
	ctx   context.Context
	shard int // the fan-out shard that queues its live responses (fanout.go)

	// Guarded by Hub.mu.
	watchers map[int64]*watcher
	nextID   int64
	ended    bool

	mu          sync.Mutex
	outbox      outbox
	queuedBytes int

	wake      chan struct{}
	ctrlSlots chan struct{}
	closed    chan struct{}
	catchUp   []*watcher          // sender only
	enc       encodedResponse     // sender only: reused for every shared response (SendMsg encodes before returning)
	lists     wiremsg.BufferLists // sender only: the buffer lists of enc's messages
	merger    runMerger           // sender only
	// relayTrace: the peer is a frontend that records spans and asked for sampled events' trace carriers.
	relayTrace bool
	// batch collects the responses written for a frontend that asked for relay batches (relaybatch.go); nil
	// on other streams. Sender only.
	batch *wiremsg.Batch
	// stamps: the frontend also asked for lag stamps (wiremsg.RelayBatchStamped), so every response in batch
	// is stamped with the start of its watcher's lag (Hub.lagStamp). Sender only.
	stamps bool
	// flow holds the sender to the frontend's acknowledgments (relayflow.go); nil unless it sends them.
	flow *relayFlow
	// flowWaited: the sender waited for acknowledgments since it last read the clock for lag checks.
	flowWaited bool
	scratch    mem.BufferSlice // sender only: one response's buffers on their way into batch
	stats      sendStats       // sender only: counts for the hub's metrics, flushed when the sender pauses
}

func newStream(h *Hub, srv pb.Watch_WatchServer) *stream {
	return &stream{hub: h, srv: srv, ctx: srv.Context(), shard: int(h.streamSeq.Add(1) - 1), watchers: map[int64]*watcher{},
		wake: make(chan struct{}, 1), ctrlSlots: make(chan struct{}, ctrlSlots), closed: make(chan struct{}),
		relayTrace: h.stages.Recording() && obs.RelayTraceRequested(srv.Context()), stats: h.metrics.newSendStats()}
}

func (s *stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// liveQueue queues a revision's group responses for the group's watchers, holding a stream's lock across
// consecutive watchers of that stream: a group lists its watchers in the order they joined, so the watchers of
// one stream mostly come together, and a stream is locked and woken once per run rather than once per watcher.
// Hub.mu is held; release must be called before anything else takes a stream's lock. Each fan-out shard has its
// own, and a stream belongs to one shard.
type liveQueue struct {
	s        *stream // locked
	wasEmpty bool    // s's outbox was empty when locked: its sender may be waiting for a wake
	queued   bool    // something was queued on s since
}

// offer queues resp for w unless w already has its share of the buffers.
func (q *liveQueue) offer(w *watcher, resp *sharedResponse) bool {
	if w.stream != q.s {
		q.release()
		q.s = w.stream
		q.s.mu.Lock()
		q.wasEmpty = q.s.outbox.len == 0
	}
	s := q.s
	if int(w.queued) >= s.hub.cfg.WatcherBufferResponses ||
		(s.queuedBytes > 0 && s.queuedBytes+resp.bytes > s.hub.cfg.StreamBufferBytes) {
		return false
	}
	s.outbox.push(frame{w: w, shared: resp, counted: true}, &s.hub.chunks)
	w.queued++
	s.queuedBytes += resp.bytes
	q.queued = true
	return true
}

// release unlocks the stream and wakes its sender if it may be waiting; a non-empty outbox was signalled when
// it stopped being empty, and the sender takes all of it.
func (q *liveQueue) release() {
	if q.s == nil {
		return
	}
	q.s.mu.Unlock()
	if q.queued && q.wasEmpty {
		q.s.signal()
	}
	q.s, q.queued = nil, false
}

// queueCatchUp tells the sender that w catches up from rev once what is queued before is written.
func (s *stream) queueCatchUp(w *watcher, rev int64) {
	s.queue(frame{w: w, ctl: &controlFrame{catchUpFrom: rev}})
}

// queueControl queues a response written as it is.
func (s *stream) queueControl(resp *pb.WatchResponse, slot bool) {
	s.queue(frame{ctl: &controlFrame{resp: resp, slot: slot}})
}

func (s *stream) queue(f frame) {
	s.mu.Lock()
	s.outbox.push(f, &s.hub.chunks)
	if f.counted {
		f.w.queued++
	}
	s.mu.Unlock()
	s.signal()
}

// take hands the sender everything queued; the buffers count as free again.
func (s *stream) take() outbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	taken := s.outbox
	s.outbox = outbox{}
	for c := taken.head; c != nil; c = c.next {
		for i := range c.n {
			if f := &c.frames[i]; f.counted {
				f.w.queued--
			}
		}
	}
	s.queuedBytes = 0
	return taken
}

// giveBack returns written frames' chunks to the hub.
func (s *stream) giveBack(taken *outbox) { taken.release(&s.hub.chunks) }

// acquireSlot waits for room for one more control response.
func (s *stream) acquireSlot() error {
	select {
	case s.ctrlSlots <- struct{}{}:
		return nil
	case <-s.closed:
		return errStreamEnded
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (s *stream) releaseSlot() { <-s.ctrlSlots }

var errStreamEnded = errors.New("watch stream ended")

// received is a request with the time it came off the wire.
type received struct {
	req *pb.WatchRequest
	at  time.Time
}

// recvLoop handles requests until the client closes its side (nil) or the stream fails. A reader goroutine
// stamps each request as it arrives, so that one freshness check can answer for a burst of creates.
func (s *stream) recvLoop() error {
	requests := make(chan received, ctrlSlots)
	readErr := make(chan error, 1)
	go func() {
		defer close(requests)
		for {
			req, err := s.srv.Recv()
			if err != nil {
				if s.flow != nil {
					s.flow.setStuck(true) // no acknowledgment can come now (a client that half-closed still reads)
				}
				readErr <- err
				return
			}
			if s.flow != nil && req.RequestUnion == nil {
				if n, ok := wiremsg.ReadRelayAck(req.ProtoReflect().GetUnknown()); ok {
					s.flow.ack(n)
					continue
				}
			}
			r := received{req: req, at: time.Now()}
			select {
			case requests <- r:
				continue
			default:
			}
			if s.flow != nil {
				s.flow.setStuck(true)
			}
			select {
			case requests <- r:
			case <-s.closed:
				readErr <- errStreamEnded
				return
			}
			if s.flow != nil {
				s.flow.setStuck(false)
			}
		}
	}()
	for r := range requests {
		var err error
		switch u := r.req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			if u.CreateRequest != nil {
				err = s.create(u.CreateRequest, r.at)
			}
		case *pb.WatchRequest_CancelRequest:
			if u.CancelRequest != nil {
				err = s.cancelWatch(u.CancelRequest.WatchId)
			}
		case *pb.WatchRequest_ProgressRequest:
			if u.ProgressRequest != nil {
				err = s.requestProgress()
			}
		default:
			// etcd ignores a request it does not know rather than ending the stream.
		}
		if err != nil {
			return err
		}
	}
	if err := <-readErr; !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// create registers a watch as etcd does: a refused one is answered created and canceled with watch ID -1 and
// etcd's reason; an accepted one is answered created, then served live (from now or a future revision) or
// caught up (from a past revision).
func (s *stream) create(req *pb.WatchCreateRequest, receivedAt time.Time) error {
	h := s.hub
	if err := h.waitReady(s.ctx); err != nil {
		return err
	}
	h.fresh.await(s.ctx, receivedAt)
	if err := s.acquireSlot(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.ended {
		s.releaseSlot()
		return errStreamEnded
	}
	head := h.win.head
	refuse := func(reason string) {
		s.queueControl(&pb.WatchResponse{Header: h.responseHeader(head), WatchId: invalidWatchID, Created: true,
			Canceled: true, CancelReason: reason}, true)
	}
	if req.StartRevision < 0 {
		refuse(rpctypes.ErrCompacted.Error())
		return nil
	}
	spec, err := specFromRequest(req)
	if err != nil {
		refuse(err.Error())
		return nil
	}
	id := req.WatchId
	if id == autoWatchID {
		for s.watchers[s.nextID] != nil {
			s.nextID++
		}
		id = s.nextID
		s.nextID++
	} else if _, dup := s.watchers[id]; dup {
		refuse(errDuplicateWatchID.Error())
		return nil
	}
	w := &watcher{id: id, stream: s, spec: spec, startRev: req.StartRevision,
		progressNotify: req.ProgressNotify, created: h.clock()}
	w.idField.set(id)
	s.watchers[id] = w
	s.queueControl(&pb.WatchResponse{Header: h.responseHeader(head), WatchId: id, Created: true}, true)
	if req.StartRevision == 0 || req.StartRevision > head {
		w.minRev = max(head+1, req.StartRevision)
		h.groups.join(w)
		h.setState(w, stateSynced)
	} else {
		h.setState(w, stateCatchingUp)
		s.queueCatchUp(w, req.StartRevision)
	}
	h.metrics.groups.Set(float64(h.groups.len()))
	return nil
}

// cancelWatch removes a watch and answers canceled; an unknown ID gets no answer, as in etcd. The answer takes
// no control slot: a watch is answered canceled once, so these answers are bounded by the creates, which take
// one each. So a stream whose sender is behind still removes every watch it is asked to at once, and writes
// nothing more for them (a frontend cancels a stream's late watchers in a burst, issue 23), where waiting for
// a slot left the watchers after the 64th served until the sender had written the answers before them.
func (s *stream) cancelWatch(id int64) error {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	w, ok := s.watchers[id]
	if !ok || s.ended {
		return nil
	}
	h.removeWatcher(w)
	s.queueControl(&pb.WatchResponse{Header: h.responseHeader(h.win.head), WatchId: id, Canceled: true}, false)
	return nil
}

// requestProgress answers a ProgressRequest as etcd does: with one response for the whole stream (watch ID
// -1) at the head, and only when every watcher on the stream is synced and has reached its start revision.
func (s *stream) requestProgress() error {
	h := s.hub
	if err := s.acquireSlot(); err != nil {
		return err
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	head := h.win.head
	synced := len(s.watchers) > 0 && !s.ended
	for _, w := range s.watchers {
		if w.state != stateSynced || head < w.startRev {
			synced = false
			break
		}
	}
	if !synced {
		s.releaseSlot()
		return nil
	}
	s.queueControl(&pb.WatchResponse{Header: h.responseHeader(head), WatchId: invalidWatchID}, true)
	return nil
}

// progressTick sends the periodic progress notifications: to each watcher that asked for them, is synced and
// was sent no events since the last tick (etcd's rule).
func (s *stream) progressTick() {
	h := s.hub
	h.mu.RLock()
	defer h.mu.RUnlock()
	head := h.win.head
	for _, w := range s.watchers {
		if !w.progressNotify {
			continue
		}
		idle := !w.sentEvents
		w.sentEvents = false
		if !idle || w.state != stateSynced || head < w.startRev {
			continue
		}
		s.mu.Lock()
		busy := w.queued > 0
		s.mu.Unlock()
		if !busy {
			s.queue(frame{w: w, ctl: &controlFrame{resp: &pb.WatchResponse{Header: h.responseHeader(head), WatchId: w.id}},
				counted: true})
		}
	}
}

// removeWatcher takes w off its stream and out of the hub; Hub.mu is held.
func (h *Hub) removeWatcher(w *watcher) {
	w.canceled.Store(true)
	if w.state == stateSynced {
		h.groups.leave(w)
		h.metrics.groups.Set(float64(h.groups.len()))
	}
	h.setState(w, stateNone)
	delete(w.stream.watchers, w.id)
}

// end removes every watcher of the stream; the stream takes no more requests.
func (s *stream) end() {
	h := s.hub
	h.mu.Lock()
	s.ended = true
	for _, w := range s.watchers {
		h.removeWatcher(w)
	}
	delete(h.streams, s)
	h.metrics.streams.Set(float64(len(h.streams)))
	h.streamsChanged()
	h.mu.Unlock()
	close(s.closed)
}

// progressInterval is the configured interval plus etcd's jitter of up to a tenth of it.
func (h *Hub) progressInterval() time.Duration {
	d := h.cfg.ProgressNotifyInterval
	return d + time.Duration(rand.Int64N(int64(d)/10+1))
}
