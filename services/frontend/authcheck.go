package frontend

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/v3electionpb"
	"github.com/cairn-kv/cairn/api/v3lockpb"
	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// unaryInterceptor checks every unary call as etcd checks it, where it enters the system, before any handler
// forwards it; the caller goes into the handler's context (writes carry it to storage in their header). Reads
// (Range, a read-only Txn) are checked by fencedRead, which storage fences against a newer auth store. With
// authentication disabled in the copy a call costs one atomic load: it goes on anonymous, and storage refuses
// an anonymous write (ErrAuthOldRevision) if auth was enabled meanwhile through another frontend (see submit),
// which sends the call through the full check against a fresh copy.
func (g *authGate) unaryInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	switch r := req.(type) {
	case *healthpb.HealthCheckRequest, *pb.RangeRequest: // Range: checked by the KV handler, fencedRead
		return handler(ctx, req)
	case *pb.TxnRequest:
		if readOnly, _ := readOnlyRequest(&pb.InternalRaftRequest{Txn: r}); readOnly {
			var resp any
			err := g.fencedRead(ctx, func(st *gateState, c caller) error { return g.check(ctx, st, c, req) },
				func(ctx context.Context, authFence uint64) (err error) {
					resp, err = handler(context.WithValue(ctx, authFenceKey{}, authFence), req)
					return err
				})
			return resp, err
		}
	case *pb.LeaseGrantRequest, *pb.LeaseRevokeRequest:
		// Proposed by the keeper, with the fence they were checked at in the entry's header (writeFence).
		var resp any
		err := g.fencedCall(ctx, func(st *gateState, c caller) error { return g.check(ctx, st, c, req) },
			func(ctx context.Context, checked *gateState) (err error) {
				resp, err = handler(context.WithValue(ctx, writeFenceKey{}, writeFence(checked, callerOf(ctx))), req)
				return err
			})
		return resp, err
	}
	if st := g.state.Load(); st != nil && !st.Enabled {
		resp, err := handler(ctx, req)
		if !errors.Is(err, rpctypes.ErrGRPCAuthOldRevision) {
			return resp, err
		}
		if fresh, ferr := g.refresh(ctx); ferr != nil || !fresh.Enabled {
			return resp, err
		}
	}
	st, c, err := g.identify(ctx)
	if err != nil {
		return nil, err
	}
	if st.Enabled {
		if _, err := g.confirmed(ctx, st, func(st *gateState) error { return g.check(ctx, st, c, req) }); err != nil {
			return nil, err
		}
	}
	return handler(context.WithValue(ctx, callerKey{}, c), req)
}

// confirmed runs check against st and, if it is refused with permission denied, against a fresh read of the
// auth store: the copy may predate a grant made through another frontend (the fresh read then answers
// ErrAuthOldRevision to a token from before the grant, and client/v3 logs in again). It returns the state the
// check passed against.
func (g *authGate) confirmed(ctx context.Context, st *gateState, check func(*gateState) error) (*gateState, error) {
	err := check(st)
	if !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		return st, err
	}
	fresh, ferr := g.refresh(ctx)
	if ferr != nil || fresh.appliedIndex <= st.appliedIndex {
		return st, err
	}
	return fresh, check(fresh)
}

// streamInterceptor identifies the caller of every stream; the messages are checked by the stream's handler
// (Watch creates, keep-alives) or are the caller's to make (Snapshot: root only, checked here).
func (g *authGate) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	switch info.FullMethod {
	case healthpb.Health_Watch_FullMethodName, pb.Watch_Watch_FullMethodName, pb.Lease_LeaseKeepAlive_FullMethodName:
		// Each Watch create and each keep-alive is checked as it is relayed (screenWatch, screenKeepAlive): etcd
		// refuses requests, not the stream. A stream ended before its first request is read would also race the
		// client's first Send, which then fails with a bare EOF instead of etcd's error.
		return handler(srv, ss)
	}
	st, c, err := g.identify(ss.Context())
	if err != nil {
		return err
	}
	if st.Enabled {
		switch info.FullMethod {
		case pb.Maintenance_Snapshot_FullMethodName:
			err = st.CheckAdmin(c.user)
		case pb.KV_RangeStream_FullMethodName, v3electionpb.Election_Observe_FullMethodName:
			// RangeStream's request is checked by its handler; Observe's reads are the caller's own.
		default:
			err = requireUser(st, c)
		}
		if err != nil {
			return err
		}
	}
	return handler(srv, &callerStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), callerKey{}, c)})
}

// callerStream is a server stream whose context carries the caller.
type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerStream) Context() context.Context { return s.ctx }

// check is etcd's permission rule for one request of an authenticated (or anonymous) caller, auth enabled.
func (g *authGate) check(ctx context.Context, st *gateState, c caller, req any) error {
	switch r := req.(type) {
	case *pb.RangeRequest:
		return checkRange(st, c, r)
	case *pb.PutRequest:
		return g.checkPut(ctx, st, c, r)
	case *pb.DeleteRangeRequest:
		return checkDelete(st, c, r)
	case *pb.TxnRequest:
		return g.checkTxn(ctx, st, c, r)
	case *pb.CompactionRequest, *pb.MemberAddRequest, *pb.MemberRemoveRequest, *pb.MemberUpdateRequest,
		*pb.MemberPromoteRequest, *pb.DefragmentRequest, *pb.HashRequest, *pb.HashKVRequest, *pb.MoveLeaderRequest,
		*pb.DowngradeRequest:
		return st.CheckAdmin(c.user)
	case *pb.AlarmRequest:
		if r.Action == pb.AlarmRequest_GET {
			return requireUser(st, c)
		}
		return st.CheckAdmin(c.user)
	case *pb.LeaseRevokeRequest:
		if err := requireUser(st, c); err != nil {
			return err
		}
		return g.checkLeaseKeys(ctx, st, c, r.ID, authpb.Permission_WRITE)
	case *pb.LeaseTimeToLiveRequest:
		if err := requireUser(st, c); err != nil || !r.Keys {
			return err // etcd checks the lease's keys only when they are asked for
		}
		return g.checkLeaseKeys(ctx, st, c, r.ID, authpb.Permission_READ)
	case *pb.LeaseLeasesRequest:
		if err := requireUser(st, c); err != nil {
			return err
		}
		return g.checkAllLeases(ctx, st, c)
	case *pb.AuthenticateRequest, *pb.AuthStatusRequest, *pb.AuthUserGetRequest, *pb.AuthRoleGetRequest,
		*v3lockpb.LockRequest, *v3lockpb.UnlockRequest, *v3electionpb.CampaignRequest,
		*v3electionpb.ProclaimRequest, *v3electionpb.LeaderRequest, *v3electionpb.ResignRequest:
		// Anyone may authenticate or ask the status; UserGet and RoleGet check in their handler (a user may
		// read itself and its roles); the recipes' own KV and Lease calls are checked as the caller's.
		return nil
	case *pb.AuthEnableRequest, *pb.AuthDisableRequest, *pb.AuthUserAddRequest, *pb.AuthUserDeleteRequest,
		*pb.AuthUserChangePasswordRequest, *pb.AuthUserGrantRoleRequest, *pb.AuthUserRevokeRoleRequest,
		*pb.AuthUserListRequest, *pb.AuthRoleAddRequest, *pb.AuthRoleDeleteRequest,
		*pb.AuthRoleGrantPermissionRequest, *pb.AuthRoleRevokePermissionRequest, *pb.AuthRoleListRequest:
		return st.CheckAdmin(c.user)
	}
	// Everything else (LeaseGrant, MemberList, Status, ...) needs a user.
	return requireUser(st, c)
}

// checkPut is etcd's checkPutAuth: write on the key, read too for prev_kv, and write on every key of the
// lease it attaches to.
func (g *authGate) checkPut(ctx context.Context, st *gateState, c caller, r *pb.PutRequest) error {
	if err := st.Check(c.user, c.rev, r.Key, nil, authpb.Permission_WRITE); err != nil {
		return err
	}
	if r.Lease != 0 {
		if err := g.checkLeaseKeys(ctx, st, c, r.Lease, authpb.Permission_WRITE); err != nil {
			return err
		}
	}
	if r.PrevKv {
		return st.Check(c.user, c.rev, r.Key, nil, authpb.Permission_READ)
	}
	return nil
}

func checkDelete(st *gateState, c caller, r *pb.DeleteRangeRequest) error {
	if err := st.Check(c.user, c.rev, r.Key, r.RangeEnd, authpb.Permission_WRITE); err != nil {
		return err
	}
	if r.PrevKv {
		return st.Check(c.user, c.rev, r.Key, r.RangeEnd, authpb.Permission_READ)
	}
	return nil
}

// checkTxn is etcd's checkTxnPermission: read on every compare, then every op of both branches, nested txns
// included.
func (g *authGate) checkTxn(ctx context.Context, st *gateState, c caller, r *pb.TxnRequest) error {
	for _, cmp := range r.Compare {
		if err := st.Check(c.user, c.rev, cmp.Key, cmp.RangeEnd, authpb.Permission_READ); err != nil {
			return err
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			var err error
			switch {
			case op.GetRequestRange() != nil:
				rr := op.GetRequestRange()
				err = st.Check(c.user, c.rev, rr.Key, rr.RangeEnd, authpb.Permission_READ)
			case op.GetRequestPut() != nil:
				err = g.checkPut(ctx, st, c, op.GetRequestPut())
			case op.GetRequestDeleteRange() != nil:
				err = checkDelete(st, c, op.GetRequestDeleteRange())
			case op.GetRequestTxn() != nil:
				err = g.checkTxn(ctx, st, c, op.GetRequestTxn())
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// checkLeaseKeys is etcd's lease rule: a root user may; anyone else needs perm on every key attached to the
// lease (none attached, or no such lease: nothing to check).
func (g *authGate) checkLeaseKeys(ctx context.Context, st *gateState, c caller, id int64, perm authpb.Permission_Type) error {
	if st.CheckAdmin(c.user) == nil {
		return nil
	}
	keys, err := g.leaseKeys(ctx, id)
	if err != nil {
		return err
	}
	for _, key := range keys {
		if err := st.Check(c.user, c.rev, key, nil, perm); err != nil {
			return err
		}
	}
	return nil
}

// checkAllLeases is etcd's checkLeaseLeases: a root user may list, anyone else needs read on every key of
// every lease.
func (g *authGate) checkAllLeases(ctx context.Context, st *gateState, c caller) error {
	if st.CheckAdmin(c.user) == nil {
		return nil
	}
	var leases *pb.LeaseLeasesResponse
	_, err := g.f.readOn(ctx, g.f.pool.view().leaderFirst, func(r *storageReplica) (err error) {
		leases, err = r.client().LeaseLeases(ctx)
		return err
	})
	if err != nil {
		return err
	}
	for _, l := range leases.Leases {
		if err := g.checkLeaseKeys(ctx, st, c, l.ID, authpb.Permission_READ); err != nil {
			return err
		}
	}
	return nil
}

// leaseKeys returns the keys attached to a lease, read from storage (nil for an unknown lease).
func (g *authGate) leaseKeys(ctx context.Context, id int64) ([][]byte, error) {
	var resp *pb.LeaseTimeToLiveResponse
	_, err := g.f.readOn(ctx, g.f.pool.view().leaderFirst, func(r *storageReplica) (err error) {
		resp, err = r.client().LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id, Keys: true})
		return err
	})
	if err != nil {
		if status.Code(err) == codes.NotFound { // etcd's ErrGRPCLeaseNotFound
			return nil, nil
		}
		return nil, err
	}
	return resp.Keys, nil
}

// watchRefusal is etcd's isWatchPermitted: with authentication enabled, the caller must read the whole
// watched range. It returns the cancel reason etcd gives a refused create ("" when permitted).
func (g *authGate) watchRefusal(ctx context.Context, r *pb.WatchCreateRequest) string {
	st, c, err := g.identify(ctx)
	if err == nil {
		_, err = g.confirmed(ctx, st, func(st *gateState) error {
			return st.Check(c.user, c.rev, r.Key, r.RangeEnd, authpb.Permission_READ)
		})
	}
	switch {
	case err == nil:
		return ""
	case errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken), errors.Is(err, rpctypes.ErrGRPCAuthOldRevision),
		errors.Is(err, rpctypes.ErrGRPCUserEmpty):
		return err.Error()
	}
	return rpctypes.ErrGRPCPermissionDenied.Error()
}

// screenWatch checks each Watch request of a relayed stream: a create the caller may not read is answered
// as etcd answers it (created and canceled at once, watch ID -1, "permission denied") and not relayed.
func (g *authGate) screenWatch(ctx context.Context) func(any) (any, error) {
	return func(msg any) (any, error) {
		raw, ok := msg.(*wiremsg.Raw)
		if !ok {
			return nil, nil
		}
		if st := g.state.Load(); st != nil && !st.Enabled {
			return nil, nil
		}
		var req pb.WatchRequest
		if err := proto.Unmarshal(raw.Data, &req); err != nil {
			return nil, nil // the hub answers a malformed request as it does without auth
		}
		create := req.GetCreateRequest()
		if create == nil {
			return nil, nil
		}
		reason := g.watchRefusal(ctx, create)
		if reason == "" {
			return nil, nil
		}
		return &pb.WatchResponse{Header: g.f.header(), WatchId: -1, Created: true, Canceled: true,
			CancelReason: reason}, nil
	}
}

// screenKeepAlive is etcd's checkLeaseRenew on each keep-alive of a relayed stream: a root user, or one
// that may write every key of the lease.
func (g *authGate) screenKeepAlive(ctx context.Context) func(any) (any, error) {
	return func(msg any) (any, error) {
		req, ok := msg.(*pb.LeaseKeepAliveRequest)
		if !ok {
			return nil, nil
		}
		st, c, err := g.identify(ctx)
		if err != nil || !st.Enabled {
			return nil, err
		}
		if err := requireUser(st, c); err != nil {
			return nil, err
		}
		return nil, g.checkLeaseKeys(ctx, st, c, req.ID, authpb.Permission_WRITE)
	}
}

// checkRange is etcd's IsRangePermitted: read on the range.
func checkRange(st *gateState, c caller, r *pb.RangeRequest) error {
	return st.Check(c.user, c.rev, r.Key, r.RangeEnd, authpb.Permission_READ)
}
