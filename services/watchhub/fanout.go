package watchhub

import (
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/internal/obs"
)

// Parallel fan-out. The feed hands the hub a run of contiguous revisions; the hub fans the run out in two
// phases, under Hub.mu:
//
//  1. plan (on the feed's goroutine): each revision is appended to the window, matched against the groups
//     and encoded once per group, or once per distinct response shape when several groups receive the same
//     events (responseShape);
//  2. dispatch (on one goroutine per shard): the streams are split into shards (round robin as they open),
//     every group lists its watchers by shard, and each shard's goroutine queues the run's responses for its
//     own watchers, revision by revision. A stream belongs to one shard, so its outbox receives its responses
//     in revision order, and no two goroutines ever queue on the same stream.
//
// A watcher whose stream cannot take a response stops receiving the run's later revisions (behindFrom) and,
// once every shard is done, moves to catch-up from the first revision it missed (fallBehind changes the
// groups, which only the plan and this last step touch). The goroutines run only while the run's deliveries
// (watcher × revision) are many enough to pay for them (fanOutShards.minParallel); small runs are dispatched
// on the feed's goroutine, shard after shard.

// defaultMinParallel is the least deliveries in a run that are dispatched by a goroutine per shard: below it,
// starting and waiting for the goroutines costs more than the queueing.
const defaultMinParallel = 4096

// fanOutShards is how the hub splits its dispatch: shards (GOMAXPROCS when the hub was made) and the least
// deliveries in a run worth a goroutine per shard. Guarded by Hub.mu.
type fanOutShards struct {
	shards      int
	minParallel int
	// behind is each shard's list of watchers that could not take a response during the run (scratch).
	behind [][]*watcher
}

// shard is the fan-out shard of w's stream (0 for a watcher without one, in tests).
func (w *watcher) shard(shards int) int {
	if w.stream == nil {
		return 0
	}
	return w.stream.shard % shards
}

// responseShape is which of a revision's events a group receives (bit i: event i) and which of them lost their
// prev_kv (project), with the fragment flag: groups of one shape at one revision receive the same bytes, so
// the response is encoded once per shape. Revisions of more than 64 events are encoded per group.
type responseShape struct {
	events   uint64
	stripped uint64
	fragment bool
}

// maxShapedEvents is the most events a revision may have for its responses to be shared across groups.
const maxShapedEvents = 64

// revisionPlan is one revision ready to dispatch: its matched groups and their responses, in the same order.
type revisionPlan struct {
	rev     int64
	traced  *eventTrace
	encode  trace.Span // the revision's watchhub.encode stage, ended at encoded once the run is dispatched
	encoded time.Time  // when the revision's responses were all encoded, for a sampled revision
	groups  []*group
	resps   []*sharedResponse
	queued  []int // responses queued per shard, for a sampled revision's encode span
}

// deliver appends a contiguous run of revisions to the window and fans each out to the synced watchers.
func (h *Hub) deliver(run []revisionEvents) {
	h.mu.Lock()
	defer h.mu.Unlock()
	plans := make([]revisionPlan, 0, len(run))
	deliveries := 0
	for _, r := range run {
		if err := h.win.append(r); err != nil {
			h.logger.Error("revision out of order; dropped", "revision", r.rev, "err", err)
			continue
		}
		if p, ok := h.plan(r); ok {
			plans = append(plans, p)
			for _, g := range p.groups {
				deliveries += g.size
			}
		}
	}
	h.dispatch(plans, deliveries)
	h.headRev.Store(h.win.head)
	h.metrics.head.Set(float64(h.win.head))
	h.metrics.windowRevisions.Set(float64(h.win.count))
	h.metrics.windowBytes.Set(float64(h.win.bytes))
	h.notifyHead()
}

// plan matches r's events against the groups and encodes one response per matched group (per shape); it
// reports false when no group wants r. Hub.mu is held.
func (h *Hub) plan(r revisionEvents) (revisionPlan, bool) {
	if len(r.events) == 0 {
		return revisionPlan{}, false
	}
	traced := r.traced
	start := time.Time{}
	if traced != nil {
		// The stages' times are taken once and shared by the stages that meet, so they tile the root.
		start = time.Now()
		h.stages.Span(traced.ctx, "watchhub.sequence", traced.offered, start)
		traced.ended(start)
	}
	_, match := h.stages.StartAt(traced.context(), "watchhub.match", start)
	p := revisionPlan{rev: r.rev, traced: traced}
	shaped := len(r.events) <= maxShapedEvents
	for i, ev := range r.events {
		h.groups.matching(ev.Kv.Key, func(g *group) {
			if !g.spec.keeps(ev) {
				return
			}
			if len(g.batch) == 0 {
				p.groups = append(p.groups, g)
				g.shape = responseShape{fragment: g.spec.fragment}
			}
			projected := g.spec.project(ev, h.compactRev)
			g.batch = append(g.batch, projected)
			if shaped {
				g.shape.events |= 1 << i
				if projected != ev {
					g.shape.stripped |= 1 << i
				}
			}
		})
	}
	var matched time.Time
	if match.IsRecording() {
		matched = time.Now()
		match.SetAttributes(obs.AttrCount.Int(len(p.groups)))
		match.End(trace.WithTimestamp(matched))
	}
	_, p.encode = h.stages.StartAt(traced.context(), "watchhub.encode", matched)
	p.resps = make([]*sharedResponse, 0, len(p.groups))
	var byShape map[responseShape]*sharedResponse
	if shaped && len(p.groups) > 1 {
		byShape = make(map[responseShape]*sharedResponse, 4)
	}
	kept := p.groups[:0]
	for _, g := range p.groups {
		resp, err := h.encodeGroup(r, g, byShape)
		clear(g.batch)
		g.batch = g.batch[:0]
		if err != nil {
			h.logger.Error("watch response not encodable", "revision", r.rev, "err", err)
			continue
		}
		kept = append(kept, g)
		p.resps = append(p.resps, resp)
	}
	p.groups = kept
	if traced != nil {
		// The encode stage ends here and each response's sends start here, so the stages tile: the queueing on
		// the streams (dispatch) counts to the sends.
		p.encoded = time.Now()
		for _, resp := range p.resps {
			resp.traced, resp.queued = traced, p.encoded
		}
		p.queued = make([]int, h.fan.shards)
	}
	return p, true
}

// encodeGroup returns g's response at r: the one already encoded for g's shape, if any, or a new one.
func (h *Hub) encodeGroup(r revisionEvents, g *group, byShape map[responseShape]*sharedResponse) (*sharedResponse, error) {
	if resp, ok := byShape[g.shape]; ok {
		return resp, nil
	}
	limit := 0
	if g.spec.fragment {
		limit = h.cfg.fragmentBytes()
	}
	resp, err := encodeShared(h.responseHeader(r.rev), g.batch, limit)
	if err != nil {
		return nil, err
	}
	h.metrics.encodedResponses.Inc()
	resp.received, resp.arrived = r.received, r.received
	if byShape != nil {
		byShape[g.shape] = resp
	}
	return resp, nil
}

// dispatch queues the planned responses on the streams, a goroutine per shard when the run is large enough,
// then moves the watchers that could not take one to catch-up and ends the sampled revisions' stages.
// Hub.mu is held.
func (h *Hub) dispatch(plans []revisionPlan, deliveries int) {
	if len(plans) == 0 {
		return
	}
	fan := &h.fan
	if deliveries < fan.minParallel || fan.shards == 1 {
		for shard := range fan.shards {
			fan.behind[shard] = h.dispatchShard(plans, shard, fan.behind[shard][:0])
		}
	} else {
		var workers sync.WaitGroup
		for shard := 1; shard < fan.shards; shard++ {
			workers.Go(func() { fan.behind[shard] = h.dispatchShard(plans, shard, fan.behind[shard][:0]) })
		}
		fan.behind[0] = h.dispatchShard(plans, 0, fan.behind[0][:0])
		workers.Wait()
	}
	for shard, behind := range fan.behind {
		for _, w := range behind {
			h.fallBehind(w, w.behindFrom)
			w.behindFrom = 0
		}
		clear(behind)
		fan.behind[shard] = behind[:0]
	}
	h.endRun(plans)
}

// dispatchShard queues the run's responses for the watchers of one shard, revision by revision; it returns
// behind with the watchers whose stream could not take one appended (their behindFrom set).
func (h *Hub) dispatchShard(plans []revisionPlan, shard int, behind []*watcher) []*watcher {
	var q liveQueue
	defer q.release()
	for i := range plans {
		p := &plans[i]
		queued := 0
		for j, g := range p.groups {
			resp := p.resps[j]
			for _, w := range g.shards[shard] {
				if p.rev < w.minRev || w.behindFrom != 0 {
					continue // started in the future, or fell behind earlier in the run
				}
				p.traced.hold(1)
				if q.offer(w, resp) {
					queued++
					continue
				}
				p.traced.release()
				w.behindFrom = p.rev
				behind = append(behind, w)
			}
		}
		if p.queued != nil {
			p.queued[shard] = queued
		}
	}
	return behind
}

// endRun ends the encode stage of the run's sampled revisions and releases the fan-out's hold on them.
func (h *Hub) endRun(plans []revisionPlan) {
	var dispatched time.Time
	for i := range plans {
		p := &plans[i]
		if p.traced == nil {
			continue
		}
		if dispatched.IsZero() {
			dispatched = time.Now()
		}
		if p.encode.IsRecording() {
			queued := 0
			for _, n := range p.queued {
				queued += n
			}
			p.encode.SetAttributes(obs.AttrCount.Int(queued))
			p.encode.End(trace.WithTimestamp(p.encoded))
		}
		p.traced.ended(dispatched)
		p.traced.release()
	}
}

// newFanOutShards splits the dispatch in shards.
func newFanOutShards(shards int) fanOutShards {
	shards = max(1, shards)
	return fanOutShards{shards: shards, minParallel: defaultMinParallel, behind: make([][]*watcher, shards)}
}
