package leasekeeper

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/keeperclaim"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// checkpointTick is etcd's lessor loop period.
const checkpointTick = 500 * time.Millisecond

// runCheckpoints records remaining TTLs in the log (etcd's lease checkpointing): each tick, while active, the
// due checkpoints go out in entries of up to CheckpointBatch, at most CheckpointRate entries per second. A new
// keeper then starts each lease from its checkpoint instead of its full TTL.
func (k *Keeper) runCheckpoints(ctx context.Context) {
	perTick := max(1, k.cfg.CheckpointRate*int(checkpointTick/time.Millisecond)/1000)
	k.whileClocked(ctx, checkpointTick, func(ctx context.Context) {
		for range perTick {
			if !k.checkpointBatch(ctx) {
				return
			}
		}
	})
}

// checkpointBatch writes one entry of due checkpoints; it reports whether a full batch went out (more may be due).
func (k *Keeper) checkpointBatch(ctx context.Context) bool {
	now := time.Now()
	epoch, ok := k.activeEpoch(now)
	if !ok {
		return false
	}
	done := make(chan struct{})
	defer close(done)
	cps := k.table.dueCheckpoints(now, k.cfg.CheckpointBatch, done)
	if len(cps) == 0 {
		return false
	}
	ctx, span := k.stages.StartRoot(ctx, "leasekeeper.checkpoint", "other", trace.SpanContext{})
	index, err := k.writeCheckpoints(ctx, cps, epoch)
	if span.IsRecording() {
		span.SetAttributes(obs.AttrCount.Int(len(cps)), obs.AttrRaftIndex.Int64(int64(index)))
	}
	span.End()
	k.table.finishWrite(cps, index, time.Now())
	if err != nil {
		return false
	}
	k.metrics.checkpoints.Add(float64(len(cps)))
	return len(cps) == k.cfg.CheckpointBatch
}

// writeCheckpoints proposes one fenced checkpoint entry; a stale epoch makes the keeper stand by.
func (k *Keeper) writeCheckpoints(ctx context.Context, cps []*pb.LeaseCheckpoint, epoch uint64) (uint64, error) {
	var resp *storagepb.SubmitResponse
	err := k.storage(ctx, k.cfg.RequestTimeout, func(ctx context.Context, c *storageclient.Client) (err error) {
		resp, err = c.SubmitFenced(ctx, &pb.InternalRaftRequest{LeaseCheckpoint: &pb.LeaseCheckpointRequest{Checkpoints: cps}}, epoch)
		return err
	})
	if keeperclaim.IsStaleEpoch(err) {
		k.logger.Warn("checkpoint refused: this keeper's epoch is stale; standing by", "epoch", epoch, "err", err)
		k.stepDown()
	} else if err != nil {
		k.logger.Warn("lease checkpoint failed", "leases", len(cps), "epoch", epoch, "err", err)
	}
	if err != nil {
		return 0, err
	}
	return resp.Index, nil
}

// resetRequest asks for a lease's stored remaining TTL to be cleared before the lease is renewed; done (the
// lease's writing channel) is closed when the reset is written or has failed (err).
type resetRequest struct {
	ctx  context.Context // the keep-alive's
	id   int64
	done chan struct{}
	err  error
}

// runResets writes renewal resets (a checkpoint of remaining 0, as etcd's Renew does) in batches: every
// keep-alive waiting for one at the same moment shares one entry.
func (k *Keeper) runResets(ctx context.Context) {
	for {
		var batch []*resetRequest
		select {
		case <-ctx.Done():
			return
		case r := <-k.resetC:
			batch = append(batch, r)
		}
		for len(batch) < k.cfg.CheckpointBatch {
			select {
			case r := <-k.resetC:
				batch = append(batch, r)
				continue
			default:
			}
			break
		}
		k.writeResets(ctx, batch)
	}
}

func (k *Keeper) writeResets(ctx context.Context, batch []*resetRequest) {
	cps := make([]*pb.LeaseCheckpoint, len(batch))
	for i, r := range batch {
		cps[i] = &pb.LeaseCheckpoint{ID: r.id}
	}
	var index uint64
	epoch, ok := k.activeEpoch(time.Now())
	err := keeperclaim.ErrNotActive
	if ok {
		// One entry resets the TTLs of every keep-alive waiting: a batch span linking the sampled ones, whose
		// context the storage write carries.
		var renewals obs.Batch
		for _, r := range batch {
			renewals.Add(r.ctx)
		}
		span := k.stages.StartBatch("leasekeeper.checkpoint", &renewals)
		index, err = k.writeCheckpoints(trace.ContextWithSpan(ctx, span), cps, epoch)
		span.End()
	}
	if keeperclaim.IsStaleEpoch(err) {
		err = keeperclaim.ErrNotActive // the client's keep-alive goes to the active keeper
	}
	k.table.finishWrite(cps, index, time.Now())
	for _, r := range batch {
		r.err = err
		close(r.done)
	}
}
