package leasekeeper

import (
	"context"
	"time"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// runReconcile compares the lease table with storage every ReconcileInterval: the bus may lose records.
func (k *Keeper) runReconcile(ctx context.Context) {
	every(ctx, k.cfg.ReconcileInterval, func(ctx context.Context) {
		if err := k.reconcile(ctx); err != nil {
			k.logger.Warn("lease reconciliation failed", "err", err)
		}
	})
}

// reconcile loads every lease record from storage (linearizably) into the table.
func (k *Keeper) reconcile(ctx context.Context) error {
	records, applied, err := k.leaseRecords(ctx)
	if err != nil {
		return err
	}
	k.table.reconcile(records, applied, time.Now())
	k.metrics.reconciles.Inc()
	return nil
}

// leaseRecords reads every lease record from storage, linearizably, with the applied index it was read at.
func (k *Keeper) leaseRecords(ctx context.Context) ([]*storagepb.LeaseRecord, uint64, error) {
	var records []*storagepb.LeaseRecord
	var applied uint64
	err := k.storage(ctx, k.cfg.RequestTimeout, func(ctx context.Context, c *storageclient.Client) (err error) {
		records, applied, err = c.LeaseRecords(ctx)
		return err
	})
	return records, applied, err
}

// runAuthPoll tells the guard whether the auth store has authentication enabled (read from a storage's
// status), from the start and then every ReconcileInterval: only callers without the relay secret depend on
// it, and for them the guard reads it again whenever the last read is older than relayauth.FreshFor
// (SetRefresh in New), so polling it often would only keep an idle stack busy.
func (k *Keeper) runAuthPoll(ctx context.Context) {
	poll := func(ctx context.Context) {
		if err := k.readAuthEnabled(ctx); err != nil && ctx.Err() == nil {
			k.logger.Debug("reading whether auth is enabled failed", "err", err)
		}
	}
	poll(ctx)
	every(ctx, k.cfg.ReconcileInterval, poll)
}

// readAuthEnabled reads from a storage whether authentication is enabled, for the guard.
func (k *Keeper) readAuthEnabled(ctx context.Context) error {
	return k.storage(ctx, k.cfg.RequestTimeout, func(ctx context.Context, c *storageclient.Client) error {
		st, err := c.Status(ctx)
		if err == nil {
			k.guard.SetAuthEnabled(st.AuthEnabled)
		}
		return err
	})
}
