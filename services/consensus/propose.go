package consensus

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"

	grpccodes "google.golang.org/grpc/codes"

	"github.com/cairn-kv/cairn/internal/link"
	"github.com/cairn-kv/cairn/internal/obs"
)

// ErrEmptyProposal refuses a proposal without data: it would be indistinguishable from a leader's empty
// entry on Committed.
var ErrEmptyProposal = status.Error(grpccodes.InvalidArgument, "consensus: empty proposal")

// proposal is one Propose call on its way into raft.
type proposal struct {
	data []byte
	// parent is the proposer's context and span its consensus.propose span, set only when the proposer's
	// trace is sampled.
	parent context.Context
	span   trace.Span
	// done is called once, by the raft loop, when raft took the proposal (nil) or refused it. It must not
	// block. A proposal of the propose link has call instead, answered the same way.
	done func(error)
	call *link.Call
}

func (p *proposal) finish(err error) {
	if p.span != nil {
		if err != nil {
			p.span.RecordError(err)
			p.span.SetStatus(codes.Error, err.Error())
		}
		p.span.End()
	}
	if p.call != nil {
		answerProposal(p.call, err)
		return
	}
	p.done(err)
}

// Propose implements commitlog.Log: it returns once raft took the proposal (appended it on the leader, or
// forwarded it to the leader), or refused it. The trace context in ctx parents the proposal-to-commit span.
func (n *Node) Propose(ctx context.Context, data []byte) error {
	result := make(chan error, 1)
	if err := n.submit(ctx, data, func(err error) { result <- err }); err != nil {
		return err
	}
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopping:
		return n.stopped()
	}
}

// submit checks a proposal and queues it for the raft loop, which calls done with the outcome; when
// submit returns an error, done is never called. A full queue blocks submit: that is the back-pressure
// every proposer feels.
func (n *Node) submit(ctx context.Context, data []byte, done func(error)) error {
	p, err := n.newProposal(ctx, data)
	if err != nil {
		return err
	}
	p.done = done
	return n.enqueue(ctx, p)
}

// newProposal checks a proposal and makes it, with its consensus.propose span when ctx's trace is sampled;
// the caller sets done or call. Proposals are recycled (Node.proposals): the raft loop puts one back once
// finished, so a write costs none.
func (n *Node) newProposal(ctx context.Context, data []byte) (*proposal, error) {
	switch {
	case len(data) == 0:
		return nil, ErrEmptyProposal
	case len(data) > n.cfg.MaxRequestBytes:
		return nil, rpctypes.ErrGRPCRequestTooLarge
	case n.lead.Load() == 0:
		n.metrics.proposals(1, rpctypes.ErrGRPCNoLeader)
		return nil, rpctypes.ErrGRPCNoLeader
	}
	p, _ := n.proposals.Get().(*proposal)
	if p == nil {
		p = &proposal{}
	}
	p.data = data
	if _, span := n.stages.Start(ctx, "consensus.propose"); span.IsRecording() {
		span.SetAttributes(obs.AttrBytes.Int(len(data)))
		p.parent, p.span = ctx, span
	}
	return p, nil
}

// enqueue queues p for the raft loop, waiting while the queue is full until ctx ends or the node stops.
func (n *Node) enqueue(ctx context.Context, p *proposal) error {
	select {
	case n.proposeC <- p:
		return nil
	case <-n.stopping:
		return n.stopped()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// proposalTraces follows sampled proposals from raft's acceptance to commit: each gets a consensus.commit span
// (under the proposer's span, beside its consensus.propose), and the batched stages in between (the WAL append
// and fsync, the sends to peers, the delivery of the committed entries) link the waiting ones. Only the raft
// loop uses it, and only sampled proposals are tracked, so it costs nothing when no request is sampled.
type proposalTraces struct {
	stages obs.StageTracer
	byData map[string][]tracedProposal
	count  int
}

type tracedProposal struct {
	span  trace.Span // consensus.commit
	since time.Time
}

// maxTracedProposals bounds the spans waiting for commit; beyond it new ones are not followed.
const maxTracedProposals = 10000

// traceTimeout ends spans of proposals that never committed (dropped by a leader change).
const traceTimeout = 30 * time.Second

func newProposalTraces(stages obs.StageTracer) *proposalTraces {
	return &proposalTraces{stages: stages, byData: map[string][]tracedProposal{}}
}

// add starts following p, which raft just took.
func (t *proposalTraces) add(p *proposal) {
	if t.count >= maxTracedProposals {
		return
	}
	_, span := t.stages.Start(p.parent, "consensus.commit")
	key := string(p.data)
	t.byData[key] = append(t.byData[key], tracedProposal{span: span, since: time.Now()})
	t.count++
}

// link adds every proposal waiting for its commit to batch.
func (t *proposalTraces) link(batch *obs.Batch) {
	for _, waiting := range t.byData {
		for _, tp := range waiting {
			batch.AddContext(tp.span.SpanContext())
		}
	}
}

// following reports whether a sampled proposal waits for its commit: whether a batched stage would be recorded.
func (t *proposalTraces) following() bool { return t.count > 0 }

// stage records a batched stage that ran from start to now as a span linking every waiting proposal, with
// count (entries, messages) as cairn.count. It does nothing when none is waiting.
func (t *proposalTraces) stage(name string, start time.Time, count int) {
	if t.count == 0 || count == 0 {
		return
	}
	t.stageTo(name, start, time.Now(), count)
}

// stageTo is stage of a stage that ended at end.
func (t *proposalTraces) stageTo(name string, start, end time.Time, count int) {
	if t.count == 0 || count == 0 {
		return
	}
	var batch obs.Batch
	t.link(&batch)
	span := t.stages.StartBatchAt(name, &batch, start)
	span.SetAttributes(obs.AttrCount.Int(count))
	span.End(trace.WithTimestamp(end))
}

// committed ends the span of the proposal that e carries, if it is tracked, and links it to batch.
func (t *proposalTraces) committed(e *raftpb.Entry, batch *obs.Batch) {
	if t.count == 0 {
		return
	}
	waiting, ok := t.byData[string(e.GetData())]
	if !ok {
		return
	}
	tp := waiting[0]
	tp.span.SetAttributes(obs.AttrRaftIndex.Int64(int64(e.GetIndex())), attribute.Int64("raft.term", int64(e.GetTerm())))
	tp.span.End()
	batch.AddContext(tp.span.SpanContext())
	if len(waiting) == 1 {
		delete(t.byData, string(e.GetData()))
	} else {
		t.byData[string(e.GetData())] = waiting[1:]
	}
	t.count--
}

func (t *proposalTraces) expire(now time.Time) {
	if t.count == 0 {
		return
	}
	for key, waiting := range t.byData {
		kept := waiting[:0]
		for _, tp := range waiting {
			if now.Sub(tp.since) < traceTimeout {
				kept = append(kept, tp)
				continue
			}
			tp.span.SetStatus(codes.Error, "not committed: dropped or superseded")
			tp.span.End()
			t.count--
		}
		if len(kept) == 0 {
			delete(t.byData, key)
		} else {
			t.byData[key] = kept
		}
	}
}

func (t *proposalTraces) abort() {
	for _, waiting := range t.byData {
		for _, tp := range waiting {
			tp.span.SetStatus(codes.Error, "member stopped")
			tp.span.End()
		}
	}
	t.byData, t.count = map[string][]tracedProposal{}, 0
}
