package storage

import (
	"context"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/etcdcheck"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// A write answered from the apply path: a pipeline's Put, DeleteRange or Txn that writes is proposed from a
// worker, and the apply loop answers it once this storage has applied it, where Submit parks a goroutine per
// write until then; and on a remote log (commitlog.AsyncProposer) the worker does not wait for consensus to
// take the proposal either. Under etcd's benchmark (1000 clients) a leader storage parked ~1,100 goroutines, 9–10 MiB of
// stacks that counted against its memory limit (and leave that much less room for the heap, so more collections
// under a low limit). What the answer needs is what Submit's needs; a write whose answer needs more (sealed
// values to open, a physical compaction to wait for) takes Submit's path.

// answersFromApply reports whether req's answer can be given by the apply loop: a write (Put, DeleteRange, or a
// Txn that writes) on a storage that seals nothing, so that answering needs no call to anything.
func (s *Storage) answersFromApply(req *pb.InternalRaftRequest) bool {
	if s.keyring != nil || req == nil || req.Range != nil || req.Alarm != nil || req.Compaction != nil {
		return false // the request Submit refuses or answers by itself goes its way
	}
	return req.Put != nil || req.DeleteRange != nil || (req.Txn != nil && !mvcc.IsTxnReadOnly(req.Txn))
}

// startSubmit is SubmitFenced for a request answersFromApply accepts: it proposes req and returns; done is
// called once, with what SubmitFenced would have returned, from the apply loop when this storage applied it,
// or when proposing failed or ctx ended first. done must not block.
func (s *Storage) startSubmit(ctx context.Context, req *pb.InternalRaftRequest, keeperEpoch uint64,
	done func(*storagepb.SubmitResponse, error)) {
	start := time.Now()
	ctx, span := s.stages.Start(ctx, "storage.submit")
	finish := func(resp *storagepb.SubmitResponse, err error) {
		s.endSubmit(span, req, start, resp, err)
		done(resp, err)
	}
	if err := etcdcheck.Write(req, s.cfg.limits()); err != nil {
		finish(nil, err)
		return
	}
	ctx, cancel := s.withRequestTimeout(ctx)
	if err := s.checkQuota(ctx, req); err != nil {
		cancel()
		finish(nil, err)
		return
	}
	s.stampRequest(req)
	s.proposeThen(ctx, &storagepb.Entry{Request: req, KeeperEpoch: keeperEpoch}, func(res *mvcc.Result, err error) {
		cancel()
		var resp *storagepb.SubmitResponse
		switch {
		case err != nil:
		case res.Err != nil:
			err = res.Err
		default:
			resp, err = wrapResponse(res)
		}
		finish(resp, err)
	})
}

// proposeThen is propose that does not wait: then is called once, from the apply loop with the result once this
// storage applied entry, or with propose's error when proposing failed or ctx's deadline passed first.
func (s *Storage) proposeThen(ctx context.Context, entry *storagepb.Entry, then func(*mvcc.Result, error)) {
	if reason := s.unhealthyReason(); reason != "" {
		then(nil, unavailable(reason))
		return
	}
	if entry.Request == nil {
		then(nil, rpctypes.ErrGRPCNotCapable)
		return
	}
	id := entry.Request.ID
	data, err := s.encodeEntry(ctx, entry)
	if err != nil {
		then(nil, err)
		return
	}
	s.metrics.pending.Inc()
	var proposed atomic.Int64 // when Propose returned, for the wait_commit span; the apply may come first
	until, _ := ctx.Deadline()
	// Exactly one of the apply, a failed proposal and the deadline takes the waiter, and answers. The deadline
	// comes from the waiters' one timer, not from a watch on ctx per write: a call its caller abandoned is
	// answered (to nobody) when it is applied, or at its deadline.
	s.waiters.registerFunc(waiter{entry: entry, encoded: data, done: func(a applied) {
		s.metrics.pending.Dec()
		if a.res == nil {
			then(nil, ctxError(ctx)) // the deadline passed first
			return
		}
		if s.stages.Sampled(ctx) {
			from := a.start // the apply began before Propose returned: no wait for the commit
			if at := proposed.Load(); at != 0 && at < a.start.UnixNano() {
				from = time.Unix(0, at)
			}
			s.stages.Span(ctx, "storage.wait_commit", from, a.start)
			s.stages.Span(ctx, "storage.wait_applied", a.end, time.Now())
		}
		then(a.res, nil)
	}}, until)
	proposeCtx, span := s.stages.Start(ctx, "storage.propose")
	if span.IsRecording() {
		span.SetAttributes(obs.AttrBytes.Int(len(data)))
	}
	acked := func(err error) {
		at := time.Now()
		span.End(trace.WithTimestamp(at)) // where wait_commit begins, unless the apply came first
		proposed.Store(at.UnixNano())
		if err != nil && s.waiters.take(id) {
			s.metrics.pending.Dec()
			then(nil, proposeError(ctx, err))
		}
	}
	if async, ok := s.log.(commitlog.AsyncProposer); ok {
		async.ProposeThen(proposeCtx, data, acked) // the worker goes on: nothing waits for consensus's ack
		return
	}
	acked(s.log.Propose(proposeCtx, data))
}
