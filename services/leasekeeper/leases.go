package leasekeeper

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/keeperclaim"
	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// The Lease API, as etcd v3.7's: callable in-process and served over gRPC by server. A standby answers every
// call with keeperclaim.ErrNotActive. Errors are etcd's (rpctypes).

// Grant grants a lease through the log (storage chooses the ID when r.ID is 0 and raises a TTL below the
// minimum to it) and starts its clock.
func (k *Keeper) Grant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	epoch, ok := k.servingEpoch(ctx)
	if !ok {
		return nil, keeperclaim.ErrNotActive
	}
	resp, err := k.submit(ctx, &pb.InternalRaftRequest{Header: fencedHeader(ctx),
		LeaseGrant: &pb.LeaseGrantRequest{ID: r.ID, TTL: r.TTL}}, epoch)
	if err != nil {
		return nil, err
	}
	grant := resp.GetLeaseGrant()
	k.table.mu.Lock()
	k.table.add(grant.ID, grant.TTL, resp.Index, time.Now())
	k.table.mu.Unlock()
	return grant, nil
}

// Revoke revokes a lease through the log: its keys are deleted in one revision.
func (k *Keeper) Revoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	epoch, ok := k.servingEpoch(ctx)
	if !ok {
		return nil, keeperclaim.ErrNotActive
	}
	resp, err := k.submit(ctx, &pb.InternalRaftRequest{Header: fencedHeader(ctx), LeaseRevoke: &pb.LeaseRevokeRequest{ID: r.ID}}, epoch)
	if err != nil {
		return nil, err
	}
	k.table.mu.Lock()
	k.table.remove(r.ID, resp.Index)
	k.table.mu.Unlock()
	return resp.GetLeaseRevoke(), nil
}

// fencedHeader is the entry header of a client's grant or revoke: the auth fence the frontend that relayed it
// checked it against (relayauth.Fence), which storage refuses with ErrAuthOldRevision if the auth store changed
// since, as it refuses a KV write; nil for a call no frontend fenced (auth checks are the frontends', and the
// keeper's own revokes are not a client's).
func fencedHeader(ctx context.Context) *pb.RequestHeader {
	fence, ok := relayauth.FenceFrom(ctx)
	if !ok {
		return nil
	}
	return &pb.RequestHeader{Username: fence.User, AuthRevision: fence.Revision}
}

// submit proposes a fenced request; a stale epoch makes the keeper stand by and the caller try another keeper.
func (k *Keeper) submit(ctx context.Context, req *pb.InternalRaftRequest, epoch uint64) (*storagepb.SubmitResponse, error) {
	var resp *storagepb.SubmitResponse
	err := k.storage(ctx, k.cfg.RequestTimeout, func(ctx context.Context, c *storageclient.Client) (err error) {
		resp, err = c.SubmitFenced(ctx, req, epoch)
		return err
	})
	if keeperclaim.IsStaleEpoch(err) {
		k.stepDown()
		return nil, keeperclaim.ErrNotActive
	}
	return resp, err
}

// Renew is one keep-alive: it restarts the lease's TTL and returns the granted TTL, or 0 when the lease does not
// exist (etcd answers an unknown lease's keep-alive with TTL 0, not an error). A keep-alive is not a proposal,
// except the first after a checkpoint: storage's remaining TTL for the lease is reset through the log before the
// renewal is answered (as etcd's Renew does), so a new keeper never starts the lease from a stale checkpoint.
func (k *Keeper) Renew(ctx context.Context, id int64) (int64, error) {
	for {
		if _, ok := k.servingEpoch(ctx); !ok {
			return 0, keeperclaim.ErrNotActive
		}
		k.table.mu.Lock()
		if !k.table.active {
			k.table.mu.Unlock()
			return 0, keeperclaim.ErrNotActive
		}
		l := k.table.leases[id]
		if l == nil {
			k.table.mu.Unlock()
			known, err := k.learnLease(ctx, id)
			if err != nil || !known {
				return 0, err
			}
			continue
		}
		now := time.Now()
		switch {
		case !l.deadline.After(now):
			// Expired: as etcd, wait for its revoke and answer TTL 0.
			gone := l.gone
			k.table.mu.Unlock()
			return 0, k.wait(ctx, gone)
		case l.writing != nil:
			writing := l.writing
			k.table.mu.Unlock()
			if err := k.wait(ctx, writing); err != nil {
				return 0, err
			}
		case l.storedRemaining > 0:
			reset := &resetRequest{ctx: ctx, id: id, done: make(chan struct{})}
			l.writing = reset.done
			k.table.mu.Unlock()
			if err := k.awaitReset(ctx, reset); err != nil {
				return 0, err
			}
		default:
			k.table.renew(l, now)
			ttl := l.ttl
			k.table.mu.Unlock()
			k.metrics.keepAlives.Inc()
			return ttl, nil
		}
	}
}

// awaitReset hands reset to the reset writer and waits for it to be written.
func (k *Keeper) awaitReset(ctx context.Context, reset *resetRequest) error {
	select {
	case k.resetC <- reset:
	case <-ctx.Done():
		k.table.finishWrite([]*pb.LeaseCheckpoint{{ID: reset.id}}, 0, time.Now())
		close(reset.done)
		return status.FromContextError(ctx.Err()).Err()
	case <-k.stopping:
		return keeperclaim.ErrNotActive
	}
	select {
	case <-reset.done:
		return reset.err
	case <-k.stopping:
		return keeperclaim.ErrNotActive
	}
}

// wait waits for ch to close, at most RevokeRetry.
func (k *Keeper) wait(ctx context.Context, ch <-chan struct{}) error {
	t := time.NewTimer(k.cfg.RevokeRetry)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-t.C:
		return status.Error(codes.Unavailable, "cairn leasekeeper: lease is being revoked or checkpointed; retry")
	}
}

// learnLease asks storage about a lease the table does not know (granted elsewhere, its record not yet seen)
// and adds it; known is false when storage has no such lease.
func (k *Keeper) learnLease(ctx context.Context, id int64) (known bool, err error) {
	var ttl *pb.LeaseTimeToLiveResponse
	err = k.storage(ctx, k.cfg.RequestTimeout, func(ctx context.Context, c *storageclient.Client) (err error) {
		ttl, err = c.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id})
		return err
	})
	if err != nil || ttl.TTL < 0 {
		return false, err
	}
	now := time.Now()
	k.table.mu.Lock()
	defer k.table.mu.Unlock()
	delete(k.table.tombstones, id) // storage read it linearizably: it exists (again)
	if l := k.table.add(id, ttl.GrantedTTL, 0, now); l != nil && ttl.TTL != ttl.GrantedTTL && l.storedIndex == 0 {
		l.storedRemaining, l.storedSeenAt = ttl.TTL, now
		if k.table.active {
			k.table.startClock(l, now, now.Add(seconds(ttl.TTL)))
		}
	}
	return true, nil
}

// TimeToLive reports a lease's remaining TTL on the active keeper's clock (truncated to seconds, as etcd), its
// granted TTL and, if asked, its keys; TTL -1 when the lease does not exist.
func (k *Keeper) TimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if _, ok := k.servingEpoch(ctx); !ok {
		return nil, keeperclaim.ErrNotActive
	}
	var resp *pb.LeaseTimeToLiveResponse
	err := k.storage(ctx, k.cfg.RequestTimeout, func(ctx context.Context, c *storageclient.Client) (err error) {
		resp, err = c.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: r.ID, Keys: r.Keys})
		return err
	})
	if err != nil || resp.TTL < 0 {
		return resp, err
	}
	k.table.mu.Lock()
	if l := k.table.leases[r.ID]; l != nil && k.table.active {
		resp.TTL = max(0, int64(l.remaining(time.Now()).Seconds()))
	}
	k.table.mu.Unlock()
	return resp, nil
}

// Leases lists every lease, soonest to expire first (as etcd).
func (k *Keeper) Leases(ctx context.Context) (*pb.LeaseLeasesResponse, error) {
	if _, ok := k.servingEpoch(ctx); !ok {
		return nil, keeperclaim.ErrNotActive
	}
	var resp *pb.LeaseLeasesResponse
	err := k.storage(ctx, k.cfg.RequestTimeout, func(ctx context.Context, c *storageclient.Client) (err error) {
		resp, err = c.LeaseLeases(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(resp.Leases))
	for i, l := range resp.Leases {
		ids[i] = l.ID
	}
	for i, id := range k.table.leasesByExpiry(ids) {
		resp.Leases[i] = &pb.LeaseStatus{ID: id}
	}
	return resp, nil
}

// header is the response header for answers the keeper makes itself.
func (k *Keeper) header() *pb.ResponseHeader {
	return &pb.ResponseHeader{Revision: k.lastRevision.Load()}
}
