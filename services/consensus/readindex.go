package consensus

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3"

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
		index, err := r.round()
		if span.IsRecording() {
			span.SetAttributes(obs.AttrRaftIndex.Int64(int64(index)))
		}
		span.End()
		for _, ch := range batch {
			ch <- readResult{index: index, err: err}
		}
	}
}

// round asks raft for one read index, re-asking every half election timeout (a request can be lost with
// a leader change) until the request timeout.
func (r *readIndexer) round() (uint64, error) {
	r.nextID++
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
