package frontend

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairn-kv/cairn/internal/relayauth"
)

// fenceRetries bounds how many times a read refused by storage's auth fence is checked and sent again: each
// retry follows a fresh read of the auth store, so only auth changes arriving faster than reads exhaust it.
const fenceRetries = 3

// fencedRead runs a read checked by check against this frontend's copy of the auth store, as etcd checks a read
// after its read barrier (fencedCall): read is given the copy's read fence (authstate.State.ReadFence: auth
// revision and enabled flag) to send with the read, and storage refuses the read with ErrAuthOldRevision when
// its own fence is higher once it has applied the read index (storage's authFence). A linearizable read is thus
// never answered on permissions older than its read index. With authentication disabled in the copy the check
// is skipped: the cost is one atomic load and the fence sent (an AuthEnable made through another frontend
// raises the fence, so it is caught the same way).
func (g *authGate) fencedRead(ctx context.Context, check func(*gateState, caller) error,
	read func(ctx context.Context, authFence uint64) error) error {
	return g.fencedCall(ctx, check, func(ctx context.Context, checked *gateState) error {
		return read(ctx, checked.ReadFence())
	})
}

// fencedCall runs call, checked by check against this frontend's copy of the auth store. The copy may predate a
// change made through another frontend (it learns of those by probing), so call is given the copy it was
// checked against, to send its fence along; when the call is refused with ErrAuthOldRevision (storage found its
// auth store newer than that fence), the copy is read again and the call checked and run again. With
// authentication disabled in the copy the first attempt skips the check (the caller is anonymous).
func (g *authGate) fencedCall(ctx context.Context, check func(*gateState, caller) error,
	call func(ctx context.Context, checked *gateState) error) error {
	for attempt := 0; ; attempt++ {
		st := g.state.Load()
		if st == nil || st.Enabled || attempt > 0 {
			var c caller
			var err error
			if st, c, err = g.identify(ctx); err != nil {
				return err
			}
			if st.Enabled {
				if st, err = g.confirmed(ctx, st, func(st *gateState) error { return check(st, c) }); err != nil {
					return err
				}
			}
			ctx = context.WithValue(ctx, callerKey{}, c)
		}
		err := call(ctx, st)
		if attempt < fenceRetries && errors.Is(err, rpctypes.ErrGRPCAuthOldRevision) && ctx.Err() == nil {
			if fresh, ferr := g.refresh(ctx); ferr == nil && fresh.ReadFence() > st.ReadFence() {
				continue
			}
		}
		return err
	}
}

// writeFence is the fence a write checked against checked carries to storage in its entry's header, for
// storage's authRefusal (relayauth.Fence: lease grants and revokes, which the keeper proposes): a caller's
// user with the copy's auth revision, refused if the store's is newer; an anonymous caller (let through by a
// copy saying authentication is disabled) with the copy's read fence, refused if authentication is enabled.
func writeFence(checked *gateState, c caller) relayauth.Fence {
	if c.user != "" {
		return relayauth.Fence{User: c.user, Revision: checked.Revision}
	}
	return relayauth.Fence{Revision: checked.ReadFence()}
}

// writeFenceKey carries, into a lease grant's or revoke's handler, the fence it was checked at (writeFence).
type writeFenceKey struct{}

// fencedLeaseContext is ctx, the context of a lease grant or revoke relayed to a keeper, carrying the fence the
// call was checked at as outgoing metadata (the keeper copies it into the entry's header).
func fencedLeaseContext(ctx context.Context) context.Context {
	fence, ok := ctx.Value(writeFenceKey{}).(relayauth.Fence)
	if !ok {
		return ctx
	}
	return relayauth.WithFence(ctx, fence)
}

// authFenceKey carries, into a read-only Txn's handler, the read fence fencedRead checked it at.
type authFenceKey struct{}

// checkedAuthFence is the read fence ctx's read was checked at by fencedRead (0 when none).
func checkedAuthFence(ctx context.Context) uint64 {
	rev, _ := ctx.Value(authFenceKey{}).(uint64)
	return rev
}

// requestHeader is the header a request sent to storage's Submit carries for storage's auth checks, as etcd's
// apply checks it. A caller's write carries its user and its token's auth revision: storage refuses it if the
// auth store changed since (ErrAuthOldRevision), so the permissions checked here are those it is applied
// under. An anonymous write carries the read fence of this frontend's copy, which had authentication disabled
// (else it would have been refused here): storage refuses it if authentication is enabled when it applies it.
// A read carries the read fence it was checked at (fencedRead). nil when there is nothing to check. The header
// is into, when into is not nil (it is overwritten).
func (g *authGate) requestHeader(ctx context.Context, readOnly bool, into *pb.RequestHeader) *pb.RequestHeader {
	header := func(user string, authRevision uint64) *pb.RequestHeader {
		if into == nil {
			return &pb.RequestHeader{Username: user, AuthRevision: authRevision}
		}
		into.Reset()
		into.Username, into.AuthRevision = user, authRevision
		return into
	}
	if readOnly {
		if fence := checkedAuthFence(ctx); fence != 0 {
			return header(callerOf(ctx).user, fence)
		}
		return nil
	}
	if c := callerOf(ctx); c.user != "" {
		return header(c.user, c.rev)
	}
	if st := g.state.Load(); st != nil {
		return header("", st.ReadFence())
	}
	return nil
}
