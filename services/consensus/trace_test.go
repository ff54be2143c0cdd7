package consensus_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/internal/consensusclient"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
)

func TestProposalStagesAreSpanned(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tel := &obs.Telemetry{
		Tracers:    sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)),
		Propagator: obs.NoTelemetry().Propagator,
	}
	c := consensustest.Start(t, consensustest.Options{ConsensusAPI: true, Telemetry: tel})
	leader := c.WaitLeader(5 * time.Second)
	follower := others(c, leader)[0]
	client, err := consensusclient.New(consensusclient.Config{Target: follower.APIAddr, Telemetry: tel})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	tests := []struct {
		name string
		log  interface {
			Propose(context.Context, []byte) error
		}
		watch *consensus.Node
	}{
		{"in-process on the leader", leader.Node(), leader.Node()},
		{"remote through a follower", client, follower.Node()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx, parent := tel.Tracer("test").Start(ctx, "request")
			commits := consensustest.WatchCommits(ctx, tc.watch)
			data := []byte("traced " + tc.name)
			if _, err := commits.Propose(ctx, proposer{tc.log, tc.watch}, data); err != nil {
				t.Fatal(err)
			}
			parent.End()
			var span sdktrace.ReadOnlySpan
			waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the commit span to end, under the proposer's", func() bool {
				ended := recorder.Ended()
				for _, s := range ended {
					if s.Name() == "consensus.commit" && descends(ended, s, parent.SpanContext().SpanID()) {
						span = s
						return true
					}
				}
				return false
			})
			if span.SpanContext().TraceID() != parent.SpanContext().TraceID() {
				t.Fatal("the commit span is not in the proposer's trace")
			}
			indexed := false
			for _, a := range span.Attributes() {
				indexed = indexed || (a.Key == "raft.index" && a.Value.AsInt64() > 0)
			}
			if !indexed {
				t.Fatalf("span attributes %v carry no commit index", span.Attributes())
			}
			// The proposal's other stages: its own consensus.propose, and the batched WAL append and fsync and
			// the delivery linking its commit span (the delivery's span ends after the commit span it links).
			wanted := []string{"consensus.propose", "consensus.wal_append", "consensus.wal_fsync", "consensus.deliver"}
			stages := map[string]bool{}
			waittest.Until(t, 5*time.Second, 5*time.Millisecond, fmt.Sprintf("the proposal's stages %v", wanted), func() bool {
				ended := recorder.Ended()
				for _, s := range ended {
					if s.Name() == "consensus.propose" && descends(ended, s, parent.SpanContext().SpanID()) {
						stages[s.Name()] = true
					}
					for _, l := range s.Links() {
						if l.SpanContext.SpanID() == span.SpanContext().SpanID() {
							stages[s.Name()] = true
						}
					}
				}
				return !slices.ContainsFunc(wanted, func(want string) bool { return !stages[want] })
			})
		})
	}
}

// TestReadIndexRoundIsSpanned: a sampled ReadIndex rides in a consensus.read_index span linking it, with the
// round's number and, on the leader, the members whose heartbeat responses acknowledged the round (in a
// 3-member cluster at least one follower, for the quorum); a follower's round has no count (the answers go to
// the leader).
func TestReadIndexRoundIsSpanned(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tel := &obs.Telemetry{
		Tracers:    sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)),
		Propagator: obs.NoTelemetry().Propagator,
	}
	c := consensustest.Start(t, consensustest.Options{Telemetry: tel})
	leader := c.WaitLeader(5 * time.Second)
	tests := []struct {
		name         string
		node         *consensus.Node
		wantAnswered bool
	}{
		{"leader", leader.Node(), true},
		{"follower", others(c, leader)[0].Node(), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx, parent := tel.Tracer("test").Start(ctx, "request")
			if _, err := tc.node.ReadIndex(ctx); err != nil {
				t.Fatal(err)
			}
			parent.End()
			var round sdktrace.ReadOnlySpan
			waittest.Until(t, 5*time.Second, 5*time.Millisecond, "a consensus.read_index span linking the read", func() bool {
				for _, s := range recorder.Ended() {
					for _, l := range s.Links() {
						if s.Name() == "consensus.read_index" && l.SpanContext.SpanID() == parent.SpanContext().SpanID() {
							round = s
							return true
						}
					}
				}
				return false
			})
			attrs := map[string]int64{}
			for _, a := range round.Attributes() {
				attrs[string(a.Key)] = a.Value.AsInt64()
			}
			if attrs["cairn.read_index.round"] < 1 {
				t.Errorf("attributes %v: no round number", round.Attributes())
			}
			answered, counted := attrs["cairn.read_index.answered"]
			if counted != tc.wantAnswered || (tc.wantAnswered && (answered < 1 || answered > 2)) {
				t.Errorf("attributes %v: members answering %d (counted %v), want 1 or 2 counted: %v",
					round.Attributes(), answered, counted, tc.wantAnswered)
			}
		})
	}
}

// proposer proposes through one log and reads commits from a node (Commits.Propose takes a commitlog.Log
// only for its Propose method).
type proposer struct {
	log interface {
		Propose(context.Context, []byte) error
	}
	*consensus.Node
}

func (p proposer) Propose(ctx context.Context, data []byte) error { return p.log.Propose(ctx, data) }

// descends reports whether span's parent is ancestor, directly or through the ended spans between them (the
// propose link's client and server spans on a remote proposal).
func descends(ended []sdktrace.ReadOnlySpan, span sdktrace.ReadOnlySpan, ancestor trace.SpanID) bool {
	for range len(ended) + 1 {
		if span.Parent().SpanID() == ancestor {
			return true
		}
		var parent sdktrace.ReadOnlySpan
		for _, s := range ended {
			if s.SpanContext().SpanID() == span.Parent().SpanID() {
				parent = s
			}
		}
		if parent == nil {
			return false
		}
		span = parent
	}
	return false
}
