package leasekeeper

import (
	"context"
	"time"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/keeperclaim"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// observation is a standby's view of the claim: the state last read and when this keeper first saw it (its own
// clock). The holder's last successful renewal was sent before seenAt.
type observation struct {
	state  *storagepb.KeeperState
	seenAt time.Time
	// patience is how long the holder must stay silent after seenAt before this keeper claims the role:
	// TakeoverTimeout, doubled for the first state a keeper reads after it starts. A standby that has watched
	// the holder for a while saw its last renewal earlier than a keeper its supervisor has just restarted, so
	// without the head start both would claim at about the same moment and the restarted one could win.
	patience time.Duration
	// vouched (with peers) is set once a peer answered that this state's holder is active: the holder is
	// listed among the peers, so when none of them is it any more, it is gone.
	vouched bool
}

// runElection renews (with peers: confirms) the claim while this keeper holds it, and otherwise watches it and
// takes over when the holder has not renewed (with peers: not been seen alive) for TakeoverTimeout, or released
// it.
func (k *Keeper) runElection(ctx context.Context) {
	var seen observation
	standby := newStandbyPace(k.cfg.RenewInterval)
	tick := time.NewTicker(k.cfg.RenewInterval)
	defer tick.Stop()
	for {
		_, holder := k.holder()
		switch {
		case k.pauseElection.Load():
		case holder && standby.Stretched(): // promoted: renew or confirm at RenewInterval
			tick.Reset(standby.Reset())
			continue
		case holder && k.peers != nil:
			if !k.doze(time.Now()) {
				k.confirmClaim(ctx)
				break
			}
			// Dozing: no timer runs until a call or a lease's clock ends the doze.
			if started, clocked := k.table.clocks(); !clocked {
				tick.Stop()
				select {
				case <-ctx.Done():
					return
				case <-k.woken:
				case <-started:
				}
				tick.Reset(k.cfg.RenewInterval)
			}
		case holder:
			k.renewClaim(ctx)
		default:
			if last, wait := standby.Wait(), standby.Next(k.watchClaim(ctx, &seen)); wait != last {
				tick.Reset(wait)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// dozeAfter is how long a holder with peers and no lease goes without a Lease API call before it dozes.
const dozeAfter = 5 * time.Second

// doze reports whether the holder (with peers) may skip confirming its claim at now, and records that it
// dozes: while it knows no lease and has had no call for dozeAfter, nothing needs it to serve, and confirming
// would cost a ReadIndex round of every consensus member each RenewInterval. It dozes only from serving (its
// last confirmation succeeded); a lease or a call ends the doze. Fencing is untouched: a dormant holder serves
// only after a new confirmation (servingEpoch), and its liveness answer (SERVING) keeps the standbys waiting as
// for any live holder.
func (k *Keeper) doze(now time.Time) bool {
	idle := k.table.count() == 0 && now.Sub(time.Unix(0, k.lastCall.Load())) >= dozeAfter
	k.role.mu.Lock()
	defer k.role.mu.Unlock()
	switch {
	case !idle:
		k.role.dormant = false
	case !k.role.dormant && k.role.holder && now.Before(k.role.activeUntil):
		k.role.dormant = true
		k.logger.Debug("no lease and no call: dozing until the next call", "epoch", k.role.epoch)
	}
	return k.role.dormant
}

// servingEpoch is activeEpoch for a client's call: the call keeps the holder from dozing, and a dormant holder
// first confirms its claim (one linearizable read) and then serves.
func (k *Keeper) servingEpoch(ctx context.Context) (uint64, bool) {
	k.lastCall.Store(time.Now().UnixNano())
	if epoch, ok := k.activeEpoch(time.Now()); ok || !k.dormant() {
		return epoch, ok
	}
	k.wakeMu.Lock()
	defer k.wakeMu.Unlock()
	if epoch, ok := k.activeEpoch(time.Now()); ok || !k.dormant() { // another call woke it
		return epoch, ok
	}
	k.confirmClaim(ctx)
	k.role.mu.Lock()
	k.role.dormant = false // serving or not, the election loop confirms again from now on
	k.role.mu.Unlock()
	select {
	case k.woken <- struct{}{}:
	default: // already told
	}
	return k.activeEpoch(time.Now())
}

func (k *Keeper) dormant() bool {
	k.role.mu.Lock()
	defer k.role.mu.Unlock()
	return k.role.dormant
}

func (k *Keeper) holder() (uint64, bool) {
	k.role.mu.Lock()
	defer k.role.mu.Unlock()
	return k.role.epoch, k.role.holder
}

// renewClaim renews the claim; the keeper may serve until ActiveTimeout after the renewal was sent.
func (k *Keeper) renewClaim(ctx context.Context) {
	epoch, _ := k.holder()
	sent := time.Now()
	_, err := k.claim(ctx, &storagepb.KeeperClaim{KeeperId: k.id, ExpectedEpoch: epoch}, k.cfg.ActiveTimeout)
	switch {
	case err == nil:
		k.keepServing(epoch, sent)
	case ctx.Err() != nil: // stopping: nothing to tell
	case keeperclaim.IsClaimConflict(err):
		k.logger.Warn("lost the leasekeeper claim; standing by", "epoch", epoch, "err", err)
		k.stepDown()
	default:
		k.logger.Warn("claim renewal failed", "epoch", epoch, "err", err)
	}
}

// confirmClaim, with peers, holds the claim without a log write: a linearizable read of the claim (a ReadIndex,
// no entry) that still names this keeper at its epoch proves no standby had taken over when the read was served,
// after it was sent, so the keeper may serve until ActiveTimeout after sending it. A standby that takes over
// counts the old holder as serving until ActiveTimeout after its own claim was answered (see watchClaim).
func (k *Keeper) confirmClaim(ctx context.Context) {
	epoch, _ := k.holder()
	sent := time.Now()
	k.metrics.confirmations.Inc()
	state, err := k.readClaim(ctx, k.cfg.ActiveTimeout)
	switch {
	case err != nil && ctx.Err() != nil: // stopping: nothing to tell
	case err != nil:
		k.logger.Warn("claim confirmation failed", "epoch", epoch, "err", err)
	case state.Holder != k.id || state.Epoch != epoch:
		k.logger.Warn("lost the leasekeeper claim; standing by", "epoch", epoch, "stored", keeperclaim.Describe(state))
		k.stepDown()
	default:
		k.keepServing(epoch, sent)
	}
}

// keepServing lets the keeper serve until ActiveTimeout after sent, when a renewal or confirmation sent then
// succeeded at epoch.
func (k *Keeper) keepServing(epoch uint64, sent time.Time) {
	k.role.mu.Lock()
	lapsed := k.role.holder && k.role.epoch == epoch && !sent.Before(k.role.activeUntil)
	dozed := k.role.dormant // nobody was turned away: calls wake a dormant holder
	if k.role.holder && k.role.epoch == epoch {
		k.role.activeUntil = maxTime(k.role.activeUntil, sent.Add(k.cfg.ActiveTimeout))
	}
	k.role.mu.Unlock()
	if lapsed && !dozed {
		// Clients could not reach us while the claim lapsed: give their leases the extension again.
		k.table.extendAll(time.Now().Add(k.cfg.DeadlineExtension))
		k.logger.Warn("claim renewed after lapsing; serving again", "epoch", epoch)
	}
}

// readClaim reads the stored claim linearizably, bounded by timeout.
func (k *Keeper) readClaim(ctx context.Context, timeout time.Duration) (*storagepb.KeeperState, error) {
	var state *storagepb.KeeperState
	err := k.storage(ctx, timeout, func(ctx context.Context, c *storageclient.Client) (err error) {
		state, err = c.KeeperStatus(ctx)
		return err
	})
	return state, err
}

// watchClaim reads the claim and takes over when it is free or its holder has been silent (with peers: not
// seen alive) for TakeoverTimeout. With peers, a standby that has seen the holder active claims at once when no
// peer is the holder any more (each answers it is another keeper, or refuses the connection: the holder's
// process is gone, as after a kill -9). The wait takes no part in keeping leases safe (the new keeper counts the
// old as serving until ActiveTimeout after its claim, whatever the standby saw): it only spares a holder the
// standby merely lost sight of a needless takeover, so a holder known dead is not waited for. It reports whether
// a peer answered that the holder is active (newStandbyPace stretches the next look only then).
func (k *Keeper) watchClaim(ctx context.Context, seen *observation) (holderAnswered bool) {
	probed, sighted := "", holderUnseen // the holder asked about in this look, if any, and what the peers said
	if k.peers != nil && seen.state != nil && seen.state.Holder != "" && seen.state.Holder != k.id {
		// While the holder last read says it is active there is nothing to do: the claim is not read (each
		// read is a ReadIndex round of the consensus members).
		probed, sighted = seen.state.Holder, k.askPeers(ctx, seen, seen.state.Holder)
		if sighted == holderServing {
			return true
		}
	}
	state, err := k.readClaim(ctx, k.cfg.RenewInterval*2)
	if err != nil {
		k.logger.Debug("reading the claim failed", "err", err)
		return
	}
	now := time.Now()
	if seen.state == nil || state.Epoch != seen.state.Epoch || state.Renewals != seen.state.Renewals || state.Holder != seen.state.Holder {
		patience := k.cfg.TakeoverTimeout
		if seen.state == nil {
			patience *= 2
		}
		*seen = observation{state: state, seenAt: now, patience: patience}
	}
	if state.Holder == k.id {
		// A claim of ours won but its answer was lost, or promotion failed: whoever held the role before has
		// stopped by now.
		k.promote(ctx, state, now, now)
		return
	}
	if state.Holder != probed {
		sighted = holderUnseen
		if state.Holder != "" && k.peers != nil {
			if sighted = k.askPeers(ctx, seen, state.Holder); sighted == holderServing {
				return true
			}
		}
	}
	// A keeper that never saw this holder active (one just started, or whose peers do not list the holder)
	// waits its patience even when no peer is the holder, so the standby that was watching wins.
	gone := sighted == holderGone && seen.vouched
	if state.Holder != "" && !gone && now.Sub(seen.seenAt) < seen.patience {
		return
	}
	// The previous holder renewed last before seenAt and stopped serving ActiveTimeout after that renewal at
	// the latest; a released claim was released after it stopped.
	oldStop := seen.seenAt
	if state.Holder != "" {
		oldStop = seen.seenAt.Add(k.cfg.ActiveTimeout)
	}
	sent := time.Now()
	won, err := k.claim(ctx, &storagepb.KeeperClaim{KeeperId: k.id, ExpectedEpoch: state.Epoch, ExpectedRenewals: state.Renewals},
		k.cfg.ActiveTimeout)
	if err != nil {
		k.logger.Info("takeover claim refused", "observed", keeperclaim.Describe(state), "err", err)
		return
	}
	if state.Holder != "" && k.peers != nil {
		// A holder that only the standbys lost sight of keeps confirming until its next read shows this claim: it
		// may serve until ActiveTimeout after the claim applied, which is before now.
		oldStop = maxTime(oldStop, time.Now().Add(k.cfg.ActiveTimeout))
	}
	k.logger.Info("took over the leasekeeper claim", "previous", keeperclaim.Describe(state), "epoch", won.Epoch,
		"silent_for", now.Sub(seen.seenAt), "holder_gone", gone)
	k.promote(ctx, won, oldStop, sent)
	return false
}

// askPeers asks the peers about holder; a live answer is as good as a renewal, so the holder's silence is
// counted from now.
func (k *Keeper) askPeers(ctx context.Context, seen *observation, holder string) sighting {
	sighted, err := k.peers.ask(ctx, holder, k.cfg.RenewInterval)
	if err != nil {
		k.logger.Debug("asking the peers about the holder failed", "holder", holder, "err", err)
	}
	if sighted == holderServing {
		seen.seenAt, seen.patience, seen.vouched = time.Now(), k.cfg.TakeoverTimeout, true
	}
	return sighted
}

// claim proposes a claim through storage, bounded by timeout.
func (k *Keeper) claim(ctx context.Context, c *storagepb.KeeperClaim, timeout time.Duration) (*storagepb.KeeperState, error) {
	var state *storagepb.KeeperState
	err := k.storage(ctx, timeout, func(ctx context.Context, client *storageclient.Client) (err error) {
		state, err = client.ClaimKeeper(ctx, c)
		return err
	})
	return state, err
}

// promote makes this keeper active at the claimed state's epoch: it loads every lease from storage (read after
// the claim, so it includes every renewal reset and checkpoint the previous keeper made) and starts the clock.
func (k *Keeper) promote(ctx context.Context, state *storagepb.KeeperState, oldStop, claimSent time.Time) {
	records, applied, err := k.leaseRecords(ctx)
	if err != nil {
		// Not renewing lets the claim lapse; watchClaim tries again (or a standby takes over).
		k.logger.Error("loading leases for promotion failed", "epoch", state.Epoch, "err", err)
		return
	}
	now := time.Now()
	k.table.promote(records, applied, oldStop, k.cfg.DeadlineExtension, now)
	k.role.mu.Lock()
	k.role.holder, k.role.epoch, k.role.activeUntil = true, state.Epoch, claimSent.Add(k.cfg.ActiveTimeout)
	k.role.mu.Unlock()
	k.metrics.active.Set(1)
	k.metrics.epoch.Set(float64(state.Epoch))
	k.metrics.takeovers.Inc()
	k.logger.Info("leasekeeper active", "epoch", state.Epoch, "leases", len(records), "applied_index", applied,
		"previous_keeper_stopped_by", oldStop.Format(time.RFC3339Nano))
}

// release gives up the claim (the keeper has already stopped serving).
func (k *Keeper) release(ctx context.Context, epoch uint64) error {
	_, err := k.claim(ctx, &storagepb.KeeperClaim{KeeperId: k.id, ExpectedEpoch: epoch, Release: true}, k.cfg.RequestTimeout)
	return err
}

// storage runs f against the storage pool with a timeout.
func (k *Keeper) storage(ctx context.Context, timeout time.Duration, f func(context.Context, *storageclient.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return k.pool.Do(ctx, f)
}
