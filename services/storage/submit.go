package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/etcdcheck"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// Submit runs one write request (see storagepb.SubmitRequest) and returns etcd's response once this storage
// has applied it. A read-only Txn and an Alarm GET are answered locally. Errors are etcd's gRPC errors. req
// becomes storage's: its ID and header are set (and a lease grant's ID when it has none).
func (s *Storage) Submit(ctx context.Context, req *pb.InternalRaftRequest) (*storagepb.SubmitResponse, error) {
	return s.SubmitFenced(ctx, req, 0)
}

// SubmitFenced is Submit of a request fenced by a leasekeeper epoch: unless keeperEpoch is 0, it is applied only
// if the leasekeeper claim is still at that epoch, and refused with keeperclaim.ErrStaleEpoch otherwise.
func (s *Storage) SubmitFenced(ctx context.Context, req *pb.InternalRaftRequest, keeperEpoch uint64) (*storagepb.SubmitResponse, error) {
	start := time.Now()
	ctx, span := s.stages.Start(ctx, "storage.submit")
	resp, err := s.submit(ctx, req, keeperEpoch)
	s.endSubmit(span, req, start, resp, err)
	return resp, err
}

// endSubmit ends a Submit begun at start: its span, its metrics, and the term in its answer's header.
func (s *Storage) endSubmit(span trace.Span, req *pb.InternalRaftRequest, start time.Time, resp *storagepb.SubmitResponse, err error) {
	if span.IsRecording() {
		span.SetAttributes(obs.AttrRaftIndex.Int64(int64(resp.GetIndex())),
			obs.AttrRevision.Int64(resp.ResponseHeader().GetRevision()))
		if err != nil {
			span.SetStatus(otelcodes.Error, err.Error())
		}
	}
	span.End()
	s.metrics.observeSubmit(req, err, time.Since(start))
	if h := resp.ResponseHeader(); h != nil {
		// The term of the last entry applied: at least the term this write was committed in.
		h.RaftTerm = s.currentStore().Position().AppliedTerm
	}
}

func (s *Storage) submit(ctx context.Context, req *pb.InternalRaftRequest, keeperEpoch uint64) (*storagepb.SubmitResponse, error) {
	if req == nil {
		return nil, rpctypes.ErrGRPCNotCapable
	}
	if err := etcdcheck.Write(req, s.cfg.limits()); err != nil {
		return nil, err
	}
	ctx, cancel := s.withRequestTimeout(ctx)
	defer cancel()
	req, err := s.sealRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Range != nil:
		return nil, status.Error(codes.InvalidArgument, "cairn storage: use Range for reads")
	case req.Txn != nil && mvcc.IsTxnReadOnly(req.Txn):
		resp, err := s.readTxn(ctx, req.Txn, req.Header.GetAuthRevision()) // a read's header carries its fence
		if err != nil {
			return nil, err
		}
		return &storagepb.SubmitResponse{Response: &storagepb.SubmitResponse_Txn{Txn: resp}}, nil
	case req.Alarm != nil && req.Alarm.Action == pb.AlarmRequest_GET:
		alarms := s.currentStore().Alarms(req.Alarm.Alarm)
		return &storagepb.SubmitResponse{Response: &storagepb.SubmitResponse_Alarm{Alarm: &pb.AlarmResponse{
			Header: &pb.ResponseHeader{Revision: s.currentStore().Position().Revision}, Alarms: alarms}}}, nil
	}
	if err := s.checkQuota(ctx, req); err != nil {
		return nil, err
	}
	s.stampRequest(req)
	res, err := s.propose(ctx, &storagepb.Entry{Request: req, KeeperEpoch: keeperEpoch})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	if err := s.openResponse(ctx, res.Response); err != nil {
		return nil, err
	}
	if req.Compaction != nil && req.Compaction.Physical && res.Compacted != nil {
		select {
		case <-res.Compacted:
		case <-ctx.Done():
			return nil, ctxError(ctx)
		}
	}
	return wrapResponse(res)
}

// stampRequest gives a write its request ID (and a lease grant its lease ID) when it has none, and its header
// the request ID.
func (s *Storage) stampRequest(req *pb.InternalRaftRequest) {
	if req.ID == 0 {
		req.ID = s.ids.next()
	}
	if req.Header == nil {
		req.Header = &pb.RequestHeader{}
	}
	req.Header.ID = req.ID // Username and AuthRevision stay the frontend's: the apply checks them
	if req.LeaseGrant != nil && req.LeaseGrant.ID == 0 {
		for req.LeaseGrant.ID == 0 {
			req.LeaseGrant.ID = int64(s.ids.next() & (1<<63 - 1))
		}
	}
}

// ClaimKeeper proposes a leasekeeper claim (see keeperclaim) and returns the stored state once this storage has
// applied it, or keeperclaim.ErrClaimConflict.
func (s *Storage) ClaimKeeper(ctx context.Context, claim *storagepb.KeeperClaim) (*storagepb.SubmitResponse, error) {
	if claim.GetKeeperId() == "" {
		return nil, status.Error(codes.InvalidArgument, "cairn storage: keeper claim without a keeper id")
	}
	ctx, cancel := s.withRequestTimeout(ctx)
	defer cancel()
	id := s.ids.next()
	req := &pb.InternalRaftRequest{ID: id, Header: &pb.RequestHeader{ID: id}}
	res, err := s.propose(ctx, &storagepb.Entry{Request: req, KeeperClaim: claim})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return wrapResponse(res)
}

// propose puts entry (whose request has its ID) in the log and waits for this storage to apply it.
func (s *Storage) propose(ctx context.Context, entry *storagepb.Entry) (*mvcc.Result, error) {
	if reason := s.unhealthyReason(); reason != "" {
		return nil, unavailable(reason)
	}
	req := entry.Request
	data, err := s.encodeEntry(ctx, entry)
	if err != nil {
		return nil, err
	}
	applied := s.waiters.register(entry, data)
	defer s.waiters.cancel(req.ID)
	s.metrics.pending.Inc()
	defer s.metrics.pending.Dec()
	proposeCtx, span := s.stages.Start(ctx, "storage.propose")
	if span.IsRecording() {
		span.SetAttributes(obs.AttrBytes.Int(len(data)))
	}
	err = s.log.Propose(proposeCtx, data)
	proposed := time.Now()
	span.End(trace.WithTimestamp(proposed)) // where wait_commit begins
	if err != nil {
		return nil, proposeError(ctx, err)
	}
	select {
	case a := <-applied:
		if s.stages.Sampled(ctx) {
			s.stages.Span(ctx, "storage.wait_commit", proposed, a.start)
			s.stages.Span(ctx, "storage.wait_applied", a.end, time.Now())
		}
		return a.res, nil
	case <-ctx.Done():
		return nil, ctxError(ctx)
	}
}

// encodeEntry stamps entry with the caller's trace context and this member, and encodes it for the log.
func (s *Storage) encodeEntry(ctx context.Context, entry *storagepb.Entry) ([]byte, error) {
	entry.Trace, entry.ProposerMember = s.tel.Inject(ctx), s.cfg.MemberID
	data, err := proto.Marshal(entry)
	if err != nil {
		return nil, fmt.Errorf("marshal entry %x: %w", entry.Request.ID, err)
	}
	if err := etcdcheck.RequestSize(len(data), s.cfg.limits()); err != nil {
		return nil, err
	}
	return data, nil
}

// proposeError passes the log's gRPC errors through and maps context ends to etcd's.
func proposeError(ctx context.Context, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return ctxError(ctx)
	}
	return status.Error(codes.Unavailable, "cairn storage: proposal refused: "+err.Error())
}

// checkQuota is etcd's quota check before proposing: a write that would grow the database past the quota raises
// the NOSPACE alarm for this member and is refused.
func (s *Storage) checkQuota(ctx context.Context, req *pb.InternalRaftRequest) error {
	size, over := s.overQuota(req)
	if !over {
		return nil
	}
	alarm := &pb.InternalRaftRequest{ID: s.ids.next(), Alarm: &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE,
		MemberID: s.cfg.MemberID, Alarm: pb.AlarmType_NOSPACE}}
	alarm.Header = &pb.RequestHeader{ID: alarm.ID}
	if _, err := s.propose(ctx, &storagepb.Entry{Request: alarm}); err != nil {
		s.logger.Warn("raising the NOSPACE alarm failed", "db_size", size, "quota", s.cfg.QuotaBackendBytes, "err", err)
	}
	return rpctypes.ErrGRPCNoSpace
}

// overQuota reports whether req would grow the database (of size now) past the quota.
func (s *Storage) overQuota(req *pb.InternalRaftRequest) (size int64, over bool) {
	if s.cfg.QuotaBackendBytes < 0 {
		return 0, false
	}
	cost := mvcc.RequestCost(req)
	if cost == 0 {
		return 0, false
	}
	size = s.currentStore().CommittedSize()
	return size, size+int64(cost) >= s.cfg.QuotaBackendBytes
}

func wrapResponse(res *mvcc.Result) (*storagepb.SubmitResponse, error) {
	out := &storagepb.SubmitResponse{Index: res.Index, AuthRevision: res.AuthRevision}
	if wrapAuthResponse(out, res.Response) {
		out.ResponseHeader().Revision = res.Revision // etcd's auth responses carry the KV revision
		return out, nil
	}
	switch r := res.Response.(type) {
	case *pb.PutResponse:
		out.Response = &storagepb.SubmitResponse_Put{Put: r}
	case *pb.DeleteRangeResponse:
		out.Response = &storagepb.SubmitResponse_DeleteRange{DeleteRange: r}
	case *pb.TxnResponse:
		out.Response = &storagepb.SubmitResponse_Txn{Txn: r}
	case *pb.CompactionResponse:
		out.Response = &storagepb.SubmitResponse_Compaction{Compaction: r}
	case *pb.LeaseGrantResponse:
		out.Response = &storagepb.SubmitResponse_LeaseGrant{LeaseGrant: r}
	case *pb.LeaseRevokeResponse:
		out.Response = &storagepb.SubmitResponse_LeaseRevoke{LeaseRevoke: r}
	case *pb.LeaseCheckpointResponse:
		out.Response = &storagepb.SubmitResponse_LeaseCheckpoint{LeaseCheckpoint: r}
	case *pb.AlarmResponse:
		out.Response = &storagepb.SubmitResponse_Alarm{Alarm: r}
	case *storagepb.KeeperState:
		out.Response = &storagepb.SubmitResponse_KeeperClaim{KeeperClaim: r}
	default:
		return nil, fmt.Errorf("unexpected apply response %T", res.Response)
	}
	return out, nil
}

// linearize waits until this storage has applied a ReadIndex from the log, so a following local read sees every
// write acknowledged before the call.
func (s *Storage) linearize(ctx context.Context) error {
	// The round's storage.read_index links the wait, not its caller, so that a trace shows the round inside
	// the wait it explains (and the wait's time on the critical path goes to the round).
	waitCtx, span := s.stages.Start(ctx, "storage.wait_read_index")
	index, err := s.reads.readIndex(waitCtx)
	if span.IsRecording() {
		span.SetAttributes(obs.AttrRaftIndex.Int64(int64(index)))
	}
	span.End()
	if err != nil {
		return proposeError(ctx, err)
	}
	_, span = s.stages.Start(ctx, "storage.wait_applied")
	err = s.waitApplied(ctx, index)
	span.End()
	return err
}

// linearizeWithTimeout is linearize bounded by RequestTimeout.
func (s *Storage) linearizeWithTimeout(ctx context.Context) error {
	ctx, cancel := s.withRequestTimeout(ctx)
	defer cancel()
	return s.linearize(ctx)
}

// Range answers an etcd RangeRequest; serializable=false makes it linearizable.
func (s *Storage) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := s.rangeReady(ctx, r, 0); err != nil {
		return nil, err
	}
	s.metrics.ranges.Inc()
	_, span := s.stages.Start(ctx, "storage.bbolt_read")
	var resp *pb.RangeResponse
	err := s.withStore(func(st *mvcc.Store) (err error) {
		if resp, err = st.Range(r); err == nil {
			resp.Header.RaftTerm = st.Position().AppliedTerm
		}
		return err
	})
	if span.IsRecording() && resp != nil {
		span.SetAttributes(obs.AttrCount.Int(len(resp.Kvs)), obs.AttrRevision.Int64(resp.Header.GetRevision()))
	}
	span.End()
	return resp, sealError(err)
}

// RangeEncoded is Range answered in the RangeResponse's wire encoding, appended to alloc(n) (see
// mvcc.Store.RangeEncoded), for the pipeline to send on without encoding it again.
func (s *Storage) RangeEncoded(ctx context.Context, r *pb.RangeRequest, alloc func(n int) []byte) ([]byte, error) {
	return s.rangeEncoded(ctx, r, 0, alloc)
}

// rangeEncoded is RangeEncoded of a read a frontend checked against its copy of the auth store at authFence
// (0: not checked, see authFence).
func (s *Storage) rangeEncoded(ctx context.Context, r *pb.RangeRequest, authFence uint64, alloc func(n int) []byte) ([]byte, error) {
	if err := s.rangeReady(ctx, r, authFence); err != nil {
		return nil, err
	}
	s.metrics.ranges.Inc()
	_, span := s.stages.Start(ctx, "storage.bbolt_read")
	var encoded []byte
	err := s.withStore(func(st *mvcc.Store) (err error) {
		encoded, err = st.RangeEncoded(r, st.Position().AppliedTerm, alloc)
		return err
	})
	if span.IsRecording() {
		span.SetAttributes(obs.AttrBytes.Int(len(encoded)))
	}
	span.End()
	return encoded, sealError(err)
}

// rangeReady checks r as etcd does and, for a linearizable read, waits until this storage has applied a
// ReadIndex obtained after the call began; then it fences the read's auth check (authFence).
func (s *Storage) rangeReady(ctx context.Context, r *pb.RangeRequest, authFence uint64) error {
	if err := etcdcheck.Range(r); err != nil {
		return err
	}
	if !r.Serializable {
		ctx, cancel := s.withRequestTimeout(ctx)
		defer cancel()
		if err := s.linearize(ctx); err != nil {
			return err
		}
	}
	return s.authFence(authFence)
}

// authFence is etcd's check, after a read's barrier, that the permissions the read was checked with are still
// the auth store's. A frontend checks a read against its copy of the auth store and sends the copy's read fence
// (authstate.State.ReadFence: its auth revision and enabled flag); if this storage's fence is higher once it has
// applied the read index (a linearizable read) or now (a serializable one, which etcd checks against the
// serving member's local store too), the copy predates a change made through another frontend, and the read is
// refused with ErrAuthOldRevision: the frontend reads the store again and checks the read again. 0 is a read
// no frontend checked (a service's own).
func (s *Storage) authFence(checkedAt uint64) error {
	if checkedAt != 0 && s.currentStore().AuthReadFence() > checkedAt {
		return rpctypes.ErrGRPCAuthOldRevision
	}
	return nil
}

// readTxn answers a read-only Txn; authFence is the read fence the frontend checked it at (see authFence).
func (s *Storage) readTxn(ctx context.Context, r *pb.TxnRequest, authFence uint64) (*pb.TxnResponse, error) {
	if !mvcc.IsTxnSerializable(r) {
		if err := s.linearize(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.authFence(authFence); err != nil {
		return nil, err
	}
	_, span := s.stages.Start(ctx, "storage.bbolt_read")
	var resp *pb.TxnResponse
	err := s.withStore(func(st *mvcc.Store) (err error) { resp, err = st.ReadTxn(r); return err })
	span.End()
	if err == nil {
		s.metrics.countTxn(r, resp)
	}
	return resp, sealError(err)
}

// defaultHistoryPage and maxHistoryPage bound the events per History message.
const (
	defaultHistoryPage = 1000
	maxHistoryPage     = 10000
)

// History sends every event of r in pages, in revision order. It fails with ErrGRPCCompacted when the start is
// below the compact revision (also mid-stream, if a compaction overtakes it).
func (s *Storage) History(ctx context.Context, r *storagepb.HistoryRequest, send func(*storagepb.HistoryResponse) error) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	pos := s.currentStore().Position()
	q := mvcc.HistoryQuery{Key: r.Key, RangeEnd: r.RangeEnd, From: r.StartRevision, To: r.EndRevision, PrevKV: r.PrevKv,
		Limit: int(r.PageSize)}
	if q.From == 0 {
		q.From = pos.Revision + 1
	}
	if q.To == 0 {
		q.To = pos.Revision
	}
	if q.Limit <= 0 {
		q.Limit = defaultHistoryPage
	}
	q.Limit = min(q.Limit, maxHistoryPage)
	for {
		if err := ctx.Err(); err != nil {
			return ctxError(ctx)
		}
		var page *mvcc.HistoryPage
		err := s.withStore(func(st *mvcc.Store) (err error) { page, err = st.History(q); return err })
		if err != nil {
			return err
		}
		if err := s.openEvents(ctx, page.Events); err != nil {
			return err
		}
		if err := send(&storagepb.HistoryResponse{Events: page.Events, Revision: q.To, CompactRevision: page.CompactRev}); err != nil {
			return err
		}
		if !page.More {
			return nil
		}
		q.From, q.FromSub = page.NextFrom, page.NextSub
	}
}

// Hash has etcd's HashKV semantics.
func (s *Storage) Hash(_ context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	var resp *pb.HashKVResponse
	err := s.withStore(func(st *mvcc.Store) (err error) { resp, err = st.Hash(r.Revision); return err })
	return resp, err
}

// BackendHash has etcd's Maintenance.Hash semantics (see mvcc.Store.BackendHash).
func (s *Storage) BackendHash(_ context.Context, _ *pb.HashRequest) (*pb.HashResponse, error) {
	var resp *pb.HashResponse
	err := s.withStore(func(st *mvcc.Store) (err error) { resp, err = st.BackendHash(); return err })
	return resp, err
}

// LeaseTimeToLive reports a lease as storage knows it (see storagepb), read linearizably.
func (s *Storage) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if err := s.linearizeWithTimeout(ctx); err != nil {
		return nil, err
	}
	var resp *pb.LeaseTimeToLiveResponse
	err := s.withStore(func(st *mvcc.Store) (err error) { resp, err = st.LeaseTimeToLive(r); return err })
	return resp, err
}

// LeaseLeases lists every lease, read linearizably.
func (s *Storage) LeaseLeases(ctx context.Context, _ *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	if err := s.linearizeWithTimeout(ctx); err != nil {
		return nil, err
	}
	var resp *pb.LeaseLeasesResponse
	err := s.withStore(func(st *mvcc.Store) (err error) { resp, err = st.LeaseLeases(); return err })
	return resp, err
}

// Status reports where storage stands; the raft fields come from the log when it answers quickly (the last
// answer, while nothing has been applied since and it is younger than logStatusMaxAge).
func (s *Storage) Status(ctx context.Context) (*storagepb.StatusResponse, error) {
	st := s.currentStore()
	pos := st.Position()
	size, inUse := st.Size()
	resp := &storagepb.StatusResponse{MemberId: s.cfg.MemberID, AppliedIndex: pos.AppliedIndex,
		DurableIndex: pos.DurableIndex, Revision: pos.Revision, CompactRevision: pos.CompactRev, DbSize: size,
		DbSizeInUse: inUse, Alarms: st.Alarms(pb.AlarmType_NONE), Unhealthy: s.unhealthyReason(),
		DbSizeQuota: max(s.cfg.QuotaBackendBytes, 0), AuthRevision: st.AuthRevision(),
		AuthEnabled: st.AuthEnabled()}
	if ls, ok := s.raftStatus(ctx, pos.AppliedIndex); ok {
		resp.RaftTerm, resp.Leader, resp.RaftIndex, resp.ClusterId = ls.Term, ls.Leader, ls.CommitIndex, ls.ClusterID
	}
	return resp, nil
}

// withRequestTimeout bounds ctx by RequestTimeout, unless its deadline is already that close (a pipelined
// call's is): one timer per request instead of two.
func (s *Storage) withRequestTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= s.cfg.RequestTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}
