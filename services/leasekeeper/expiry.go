package leasekeeper

import (
	"context"
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/keeperclaim"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// runExpiry finds expired leases every ExpiryTick, while active, and hands them to the revoke workers no faster
// than RevokeRate per second (etcd's leaseRevokeRate): an expiry storm is revoked in paced batches, and other
// writes keep their share of the log.
func (k *Keeper) runExpiry(ctx context.Context) {
	k.whileClocked(ctx, k.cfg.ExpiryTick, k.dispatchExpired)
}

func (k *Keeper) dispatchExpired(ctx context.Context) {
	now := time.Now()
	if _, ok := k.activeEpoch(now); !ok {
		return
	}
	budget := min(int(k.revokeLimit.TokensAt(now)), cap(k.revokeC)-len(k.revokeC))
	if budget <= 0 {
		return
	}
	ids := k.table.expired(now, budget, k.cfg.RevokeRetry)
	k.revokeLimit.AllowN(now, len(ids))
	for _, id := range ids {
		select {
		case k.revokeC <- id:
		case <-ctx.Done():
			return
		}
	}
}

// whileClocked calls f every interval while a lease is on the clock (this keeper is active and knows a lease),
// until ctx ends; otherwise it sleeps until a lease's clock starts, so a standby, or an active keeper with no
// lease, runs no timer for it. f runs no later than interval after a clock starts, as with a plain ticker.
func (k *Keeper) whileClocked(ctx context.Context, interval time.Duration, f func(context.Context)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if started, clocked := k.table.clocks(); !clocked {
			tick.Stop()
			select {
			case <-ctx.Done():
				return
			case <-started:
			}
			tick.Reset(interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f(ctx)
		}
	}
}

// every calls f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func(context.Context)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f(ctx)
		}
	}
}

// runRevokes proposes the revoke of each expired lease, fenced by the keeper's epoch, so every member deletes
// the lease's keys in one revision. A revoke that fails is retried after RevokeRetry (the lease stays in the
// expiry heap with that retry time).
func (k *Keeper) runRevokes(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-k.revokeC:
			k.revokeExpired(ctx, id)
		}
	}
}

func (k *Keeper) revokeExpired(ctx context.Context, id int64) {
	epoch, ok := k.activeEpoch(time.Now())
	if !ok {
		return
	}
	ctx, span := k.stages.StartRoot(ctx, "leasekeeper.revoke", "lease.revoke", trace.SpanContext{})
	index, err := k.revoke(ctx, id, epoch)
	span.End()
	switch {
	case err == nil || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) || rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCLeaseNotFound):
		k.metrics.expired.Inc()
		k.table.mu.Lock()
		k.table.remove(id, index)
		k.table.mu.Unlock()
	case keeperclaim.IsStaleEpoch(err):
		k.logger.Warn("revoke refused: this keeper's epoch is stale; standing by", "lease", id, "epoch", epoch, "err", err)
		k.stepDown()
	default:
		k.metrics.revokeErrors.Inc()
		k.logger.Warn("revoke of an expired lease failed; will retry", "lease", id, "epoch", epoch, "err", err,
			"retry_in", k.cfg.RevokeRetry)
	}
}

// revoke proposes a fenced revoke of lease id and returns the log index it was applied at.
func (k *Keeper) revoke(ctx context.Context, id int64, epoch uint64) (uint64, error) {
	var resp *storagepb.SubmitResponse
	err := k.storage(ctx, k.cfg.RequestTimeout, func(ctx context.Context, c *storageclient.Client) (err error) {
		resp, err = c.SubmitFenced(ctx, &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: id}}, epoch)
		return err
	})
	if err != nil {
		return 0, err
	}
	k.noteRevision(resp.GetLeaseRevoke().GetHeader().GetRevision())
	return resp.Index, nil
}
