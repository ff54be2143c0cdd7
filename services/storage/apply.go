package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// errStoreFailed ends a Committed call when the store has failed and must be reopened.
var errStoreFailed = errors.New("store failed")

// runApplyLoop applies the committed log from the store's applied index + 1 until ctx ends, recovering from
// store failures and retrying other errors with backoff.
func (s *Storage) runApplyLoop(ctx context.Context) {
	retry := newRetryBackoff()
	for ctx.Err() == nil {
		from := s.currentStore().Position().AppliedIndex + 1
		loopCtx, cancel := context.WithCancel(ctx)
		stopOnFailure := make(chan struct{})
		go func() {
			select {
			case <-s.failedCh:
				cancel()
			case <-stopOnFailure:
			}
		}()
		err := s.log.Committed(loopCtx, from, func(entries []commitlog.Entry) error { return s.deliver(ctx, entries) })
		close(stopOnFailure)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if st := s.currentStore(); st.Err() != nil || errors.Is(err, errStoreFailed) {
			s.recoverStore(ctx, st.Err())
			continue
		}
		s.logger.Warn("apply loop interrupted; retrying", "from_index", from, "err", err)
		pause(ctx, retry.NextBackOff())
	}
}

// deliver applies one batch of committed entries in order.
func (s *Storage) deliver(ctx context.Context, entries []commitlog.Entry) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	defer s.notifyApplied()
	for i := range entries {
		if err := s.applyEntry(ctx, &entries[i]); err != nil {
			return err
		}
	}
	if s.recovering {
		// The reopened store replayed the batch: once a commit of it succeeds storage is durable again.
		if err := s.currentStore().Commit(); err != nil {
			return errStoreFailed
		}
		s.recovering = false
		s.setUnhealthy("")
		s.logger.Info("storage recovered: applying and committing again",
			"applied_index", s.currentStore().Position().AppliedIndex)
	}
	return nil
}

func (s *Storage) applyEntry(ctx context.Context, e *commitlog.Entry) error {
	st := s.currentStore()
	switch e.Kind {
	case commitlog.KindSnapshot:
		if e.Snapshot == nil || e.Snapshot.Index <= st.Position().AppliedIndex {
			return nil
		}
		return s.installSnapshot(ctx, e.Snapshot)
	case commitlog.KindNormal:
		return s.applyNormal(st, e)
	default:
		if err := st.ApplyNoop(e.Index, e.Term); err != nil {
			return errStoreFailed
		}
		return nil
	}
}

func (s *Storage) applyNormal(st *mvcc.Store, e *commitlog.Entry) error {
	entry, ok := s.ownProposal(e.Data)
	if !ok {
		entry = &storagepb.Entry{}
		if err := proto.Unmarshal(e.Data, entry); err != nil || entry.Request == nil {
			// Not ours or corrupt: skip it, identically on every member, rather than wedge the log.
			s.logger.Error("undecodable log entry skipped", "index", e.Index, "term", e.Term, "err", err)
			if err := st.ApplyNoop(e.Index, e.Term); err != nil {
				return errStoreFailed
			}
			return nil
		}
	}
	// The span runs from start to the proposer's answer (end), the times its Submit's wait_commit ends and
	// wait_applied begins, so the stages tile the Submit however the goroutines are scheduled.
	start := time.Now()
	applyCtx, span := s.stages.StartAt(s.tel.Extract(context.Background(), entry.Trace), "storage.apply", start)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(obs.AttrRaftIndex.Int64(int64(e.Index)), obs.AttrBytes.Int(len(e.Data)))
		s.commits.add(span.SpanContext())
	}
	var res *mvcc.Result
	var err error
	if entry.KeeperClaim != nil {
		res, err = st.ApplyKeeperClaim(e.Index, e.Term, entry.KeeperClaim)
	} else {
		res, err = st.ApplyFenced(e.Index, e.Term, entry.Request, entry.KeeperEpoch)
	}
	if err != nil {
		span.RecordError(err)
		return errStoreFailed
	}
	if res == nil {
		return nil // at or below the applied index: a replay
	}
	s.metrics.applied(entry.Request, res, time.Since(start))
	if span.IsRecording() {
		span.SetAttributes(obs.AttrRevision.Int64(res.Revision))
	}
	if rec, changed := appliedRecord(e, entry.Request.Compaction != nil, entry.Request.GetCompaction().GetRevision(), res); changed {
		rec.Trace = s.tel.Inject(applyCtx)
		s.sink.Applied(rec)
	}
	if a := entry.Request.Alarm; a != nil && a.Action != pb.AlarmRequest_GET && res.Err == nil {
		s.alarms.active(res.Alarms) // a disarmed CORRUPT alarm may be raised again
	}
	if res.Err == nil && res.AuthRevision != 0 {
		s.tokens.applied(e.Index, entry.Request, res.AuthRevision)
	}
	if entry.ProposerMember == s.cfg.MemberID {
		end := time.Now()
		span.End(trace.WithTimestamp(end)) // the deferred End is then a no-op
		s.waiters.trigger(entry.Request.ID, applied{res: res, start: start, end: end})
	}
	return nil
}

func appliedRecord(e *commitlog.Entry, compaction bool, compactRevision int64, res *mvcc.Result) (AppliedRecord, bool) {
	rec := AppliedRecord{Index: e.Index, Term: e.Term, Revision: res.Revision, Events: res.Events, Leases: res.Leases,
		Alarms: res.Alarms}
	if compaction && res.Err == nil {
		rec.CompactRevision = compactRevision
	}
	changed := len(rec.Events) > 0 || len(rec.Leases) > 0 || rec.CompactRevision != 0 || res.Alarms != nil
	return rec, changed
}

// recoverStore reopens a failed store at its last commit, retrying with backoff until it opens; the apply loop
// then replays the log from there.
func (s *Storage) recoverStore(ctx context.Context, cause error) {
	reason := fmt.Sprintf("storage failed, recovering from the log: %v", cause)
	s.setUnhealthy(reason)
	s.metrics.failures.Inc()
	s.logger.Error("storage failed; reopening and replaying from the log", "err", cause)
	retry := newRetryBackoff()
	for ctx.Err() == nil {
		s.storeMu.Lock()
		_ = s.store.Close()
		st, err := s.openStore()
		if err == nil {
			s.store = st
			s.setDurable(st.Position().DurableIndex)
		}
		s.storeMu.Unlock()
		if err == nil {
			s.recovering = true
			s.setUnhealthy(reason + " (replaying)")
			return
		}
		s.logger.Error("reopen of storage failed; retrying", "err", err)
		pause(ctx, retry.NextBackOff())
	}
}

// runCompactReporter reports the durable applied index to the log every LogCompactInterval when it advanced.
// Once the log has the latest, its ticker stops until setDurable says the index moved: an idle storage does not
// wake every LogCompactInterval to find nothing to report.
func (s *Storage) runCompactReporter(ctx context.Context) {
	t := time.NewTicker(s.cfg.LogCompactInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.reportDurable(ctx)
		}
		if s.durable.Load() > s.reported.Load() {
			continue // not reported (the log refused it): try again at the next tick
		}
		t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-s.durableCh:
		}
		t.Reset(s.cfg.LogCompactInterval)
	}
}

// setDurable records the index bbolt has made durable and wakes the compaction reporter.
func (s *Storage) setDurable(index uint64) {
	s.durable.Store(index)
	select {
	case s.durableCh <- struct{}{}:
	default: // already told
	}
}

func (s *Storage) reportDurable(ctx context.Context) {
	durable := s.durable.Load()
	if durable <= s.reported.Load() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if err := s.log.Compact(rctx, durable); err != nil {
		s.logger.Warn("reporting durable index to the log failed", "durable_index", durable, "err", err)
		return
	}
	s.reported.Store(durable)
}

// newRetryBackoff gives the pauses between retries of the apply loop and of a store reopen: from 50ms,
// doubling with jitter, up to 5s.
func newRetryBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.Multiplier, b.MaxInterval = 50*time.Millisecond, 2, 5*time.Second
	return b
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// ownProposal returns the entry this storage proposed and still waits for whose encoding is data, so that the
// apply does not decode again what the proposer already holds decoded (a leader's storage proposes most
// writes). It reads only the request ID and proposer from data; the bytes must be the proposed ones exactly.
func (s *Storage) ownProposal(data []byte) (*storagepb.Entry, bool) {
	id, proposer := peekEntry(data)
	if proposer != s.cfg.MemberID || id == 0 {
		return nil, false
	}
	return s.waiters.proposed(id, data)
}

// Field numbers peekEntry reads: storagepb.Entry's request and proposer_member, InternalRaftRequest's ID.
const (
	entryFieldRequest  = 1
	entryFieldProposer = 3
	requestFieldID     = 1
)

// peekEntry reads the request ID and proposer member of an encoded storagepb.Entry (0 for what it does not
// find) without decoding the rest.
func peekEntry(data []byte) (id, proposer uint64) {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return 0, 0
		}
		data = data[n:]
		switch {
		case num == entryFieldRequest && typ == protowire.BytesType:
			request, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return 0, 0
			}
			id = peekRequestID(request)
			data = data[n:]
		case num == entryFieldProposer && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return 0, 0
			}
			proposer = v
			data = data[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return 0, 0
			}
			data = data[n:]
		}
	}
	return id, proposer
}

// peekRequestID reads the ID of an encoded InternalRaftRequest (0 when it has none).
func peekRequestID(data []byte) uint64 {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return 0
		}
		data = data[n:]
		if num == requestFieldID && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return 0
			}
			return v
		}
		if n = protowire.ConsumeFieldValue(num, typ, data); n < 0 {
			return 0
		}
		data = data[n:]
	}
	return 0
}
