package consensus

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/attribute"

	"github.com/cairn-kv/cairn/internal/obs"
)

// readIndexer batches ReadIndex calls into rounds, as etcd's linearizable read loop does: every caller
// waiting when a round starts gets that round's index, which a quorum confirmed after the caller arrived.
type readIndexer struct {
	n *Node

	mu      sync.Mutex
	waiting []chan readResult
	reads   obs.Batch // the callers waiting, for the consensus.read_index span's links

	kick   chan struct{}
	states chan raft.ReadState
	nextID uint64 // only the run goroutine uses it

	// While a sampled request's round runs on the leader, tracing is set and the raft loop counts the
	// members acknowledging it into answered (distinct): raft v3.7 confirms reads by a position of its own in
	// the heartbeats' context, so position is the one the first heartbeat after the round's request carried
	// (0 until seen), and a heartbeat response carrying that position or a later one acknowledges the round.
	tracing    atomic.Bool
	position   atomic.Uint64
	answeredMu sync.Mutex
	answered   []uint64
}

type readResult struct {
	index uint64
	err   error
}

func newReadIndexer(n *Node) *readIndexer {
	return &readIndexer{n: n, kick: make(chan struct{}, 1), states: make(chan raft.ReadState, 64)}
}

// ReadIndex implements commitlog.Log. It fails fast with ErrGRPCNoLeader when there is no leader and with
// ErrGRPCTimeout when no quorum answers in time.
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	if n.lead.Load() == 0 {
		return 0, rpctypes.ErrGRPCNoLeader
	}
	r := n.reads
	result := make(chan readResult, 1)
	r.mu.Lock()
	r.waiting = append(r.waiting, result)
	r.reads.Add(ctx)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	select {
	case res := <-result:
		return res.index, res.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-n.stopping:
		return 0, n.stopped()
	}
}

// deliver is called by the raft loop with the read states of a Ready; it never blocks (a dropped state
// makes its round retry).
func (r *readIndexer) deliver(states []raft.ReadState) {
	for _, s := range states {
		select {
		case r.states <- s:
		default:
		}
	}
}

func (r *readIndexer) run() {
	for {
		select {
		case <-r.kick:
		case <-r.n.stopping:
			return
		}
		r.mu.Lock()
		batch := r.waiting
		r.waiting = nil
		span := r.n.stages.StartBatch("consensus.read_index", &r.reads)
		r.reads.Reset()
		r.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		r.nextID++
		leading := span.IsRecording() && r.n.lead.Load() == r.n.memberID
		if leading {
			r.tracing.Store(true)
		}
		index, err := r.round()
		if span.IsRecording() {
			span.SetAttributes(obs.AttrRaftIndex.Int64(int64(index)), attrRound.Int64(int64(r.nextID)))
		}
		if leading {
			r.tracing.Store(false)
			r.position.Store(0)
			r.answeredMu.Lock()
			span.SetAttributes(attrAnswered.Int(len(r.answered)))
			r.answered = r.answered[:0]
			r.answeredMu.Unlock()
		}
		span.End()
		for _, ch := range batch {
			ch <- readResult{index: index, err: err}
		}
	}
}

// The consensus.read_index span's own attributes: the round's number on this member, and, on the leader, how
// many other members acknowledged the round (heartbeat responses confirming it) before it completed.
const (
	attrRound    = attribute.Key("cairn.read_index.round")
	attrAnswered = attribute.Key("cairn.read_index.answered")
)

// heartbeatsSent notes the context of the leader's heartbeats while a round is traced: the first after the
// round's request is the position that confirms it. The raft loop calls it with every Ready's messages; it
// costs a load when no round is traced.
func (r *readIndexer) heartbeatsSent(msgs []*raftpb.Message) {
	if !r.tracing.Load() || r.position.Load() != 0 {
		return
	}
	for _, m := range msgs {
		if m.GetType() == raftpb.MsgHeartbeat && len(m.GetContext()) == 8 {
			r.position.Store(binary.LittleEndian.Uint64(m.GetContext()))
			return
		}
	}
}

// acknowledged notes a heartbeat response from member from carrying ctx: an acknowledgement of the traced
// round when ctx is its position or a later one. The raft loop calls it for every heartbeat response with a
// context; it costs a load when no round is traced.
func (r *readIndexer) acknowledged(from uint64, ctx []byte) {
	if !r.tracing.Load() {
		return
	}
	position := r.position.Load()
	if position == 0 || len(ctx) != 8 || binary.LittleEndian.Uint64(ctx) < position {
		return
	}
	r.answeredMu.Lock()
	defer r.answeredMu.Unlock()
	if !slices.Contains(r.answered, from) {
		r.answered = append(r.answered, from)
	}
}

// round asks raft for one read index (round r.nextID), re-asking every half election timeout (a request can
// be lost with a leader change) until the request timeout.
func (r *readIndexer) round() (uint64, error) {
	rctx := binary.BigEndian.AppendUint64(nil, r.nextID)
	ask := func() error {
		return r.n.control(context.Background(), func() { r.n.loop.rn.ReadIndex(rctx) })
	}
	if err := ask(); err != nil {
		return 0, err
	}
	retry := time.NewTicker(max(r.n.cfg.ElectionTimeout/2, time.Millisecond))
	defer retry.Stop()
	deadline := time.NewTimer(r.n.cfg.requestTimeout())
	defer deadline.Stop()
	for {
		select {
		case s := <-r.states:
			if bytes.Equal(s.RequestCtx, rctx) {
				return s.Index, nil
			}
		case <-retry.C:
			if r.n.lead.Load() == 0 {
				return 0, rpctypes.ErrGRPCNoLeader
			}
			if err := ask(); err != nil {
				return 0, err
			}
		case <-deadline.C:
			return 0, rpctypes.ErrGRPCTimeout
		case <-r.n.stopping:
			return 0, r.n.stopped()
		}
	}
}
