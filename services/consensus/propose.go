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
)

// ErrEmptyProposal refuses a proposal without data: it would be indistinguishable from a leader's empty
// entry on Committed.
var ErrEmptyProposal = status.Error(grpccodes.InvalidArgument, "consensus: empty proposal")

// proposal is one Propose call on its way into raft.
type proposal struct {
	data []byte
	// span is the proposal-to-commit span, set only when it records.
	span trace.Span
	// done is called once, by the raft loop, when raft took the proposal (nil) or refused it. It must not
	// block.
	done func(error)
}

func (p *proposal) finish(err error) {
	if err != nil && p.span != nil {
		p.span.RecordError(err)
		p.span.SetStatus(codes.Error, err.Error())
		p.span.End()
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
	switch {
	case len(data) == 0:
		return ErrEmptyProposal
	case len(data) > n.cfg.MaxRequestBytes:
		return rpctypes.ErrGRPCRequestTooLarge
	case n.lead.Load() == 0:
		n.metrics.proposals(1, rpctypes.ErrGRPCNoLeader)
		return rpctypes.ErrGRPCNoLeader
	}
	p := &proposal{data: data, done: done}
	if _, span := n.tracer.Start(ctx, "consensus.Propose", trace.WithTimestamp(time.Now()),
		trace.WithAttributes(attribute.Int("consensus.proposal.bytes", len(data)))); span.IsRecording() {
		p.span = span
	}
	select {
	case n.proposeC <- p:
		return nil
	case <-n.stopping:
		return n.stopped()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// proposalTraces follows recorded proposal spans from raft's acceptance to commit, through the WAL
// fsyncs in between. Only the raft loop uses it, and only spans that record are tracked, so it costs
// nothing when tracing is off.
type proposalTraces struct {
	byData map[string][]tracedProposal
	count  int
}

type tracedProposal struct {
	span  trace.Span
	since time.Time
}

// maxTracedProposals bounds the spans waiting for commit; beyond it new ones end at acceptance.
const maxTracedProposals = 10000

// traceTimeout ends spans of proposals that never committed (dropped by a leader change).
const traceTimeout = 30 * time.Second

func newProposalTraces() *proposalTraces {
	return &proposalTraces{byData: map[string][]tracedProposal{}}
}

func (t *proposalTraces) add(p *proposal) {
	p.span.AddEvent("accepted by raft")
	if t.count >= maxTracedProposals {
		p.span.End()
		return
	}
	key := string(p.data)
	t.byData[key] = append(t.byData[key], tracedProposal{span: p.span, since: time.Now()})
	t.count++
}

// synced records a WAL fsync on every waiting span: the entries they wait for are durable here now or
// will be in a later fsync.
func (t *proposalTraces) synced(took time.Duration) {
	if t.count == 0 {
		return
	}
	for _, waiting := range t.byData {
		for _, tp := range waiting {
			tp.span.AddEvent("wal fsync", trace.WithAttributes(attribute.Int64("consensus.wal.fsync_us", took.Microseconds())))
		}
	}
}

// committed ends the span of the proposal that e carries, if it is tracked.
func (t *proposalTraces) committed(e *raftpb.Entry) {
	if t.count == 0 {
		return
	}
	waiting, ok := t.byData[string(e.GetData())]
	if !ok {
		return
	}
	tp := waiting[0]
	tp.span.SetAttributes(attribute.Int64("consensus.index", int64(e.GetIndex())), attribute.Int64("consensus.term", int64(e.GetTerm())))
	tp.span.End()
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
