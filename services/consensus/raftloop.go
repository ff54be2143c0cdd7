package consensus

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/obs"
)

// maxDrain bounds how many queued inputs the loop takes before it handles a Ready, so a flood of
// proposals cannot starve the log's progress.
const maxDrain = 1024

// raftLoop owns the RawNode. Only its goroutine touches rn and the fields below.
type raftLoop struct {
	n  *Node
	rn *raft.RawNode

	batch []*proposal
	// proposing are the entries a leader proposes its batches with, reused from batch to batch; their Data is
	// nil between batches.
	proposing      []*raftpb.Entry
	traces         *proposalTraces
	confHistory    []confPoint
	storageApplied uint64
	// ticks says when raft is owed a tick (see run).
	ticks *tickClock
	// persisted is the last index of the log fsynced to the WAL here.
	persisted uint64
	// walSnapshot is the index of the last snapshot saved to the WAL; raft's storage may hold a later one,
	// taken to trim the log in memory (maybeSnapshot).
	walSnapshot uint64
}

// maxKeptProposals bounds the entries kept for proposing: a larger batch gets entries of its own.
const maxKeptProposals = maxDrain + 1

// confPoint is the configuration in force from index on, kept so a snapshot at any index since the last
// one can record the configuration at that index.
type confPoint struct {
	index     uint64
	confState *raftpb.ConfState
	members   *membership
}

func newRaftLoop(n *Node, rn *raft.RawNode, initial confPoint) (*raftLoop, error) {
	persisted, err := n.storage.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("consensus: raft storage last index: %w", err)
	}
	snap, err := n.storage.Snapshot() // the WAL's, which raft's storage was rebuilt from
	if err != nil {
		return nil, fmt.Errorf("consensus: raft storage snapshot: %w", err)
	}
	return &raftLoop{n: n, rn: rn, traces: newProposalTraces(n.stages), confHistory: []confPoint{initial},
		persisted: persisted, walSnapshot: snap.GetMetadata().GetIndex()}, nil
}

// run is the raft loop of raft's README: take inputs, then for each Ready persist, send, hand on the
// committed entries, and Advance. Raft's ticks come from a tickClock: a follower that hears its leader is
// handed them when it wakes anyway, instead of waking every heartbeat interval to tick.
func (l *raftLoop) run() {
	now := time.Now()
	l.ticks = newTickClock(l.n.cfg.HeartbeatInterval, l.n.cfg.electionTicks(), now)
	wakeAt := l.ticks.next(false)
	timer := time.NewTimer(wakeAt.Sub(now))
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			wakeAt = time.Time{} // fired: armed again below
			l.tick(time.Now())
		case m := <-l.n.recvC:
			l.step(m)
		case p := <-l.n.proposeC:
			l.batch = append(l.batch, p)
		case f := <-l.n.controlC:
			f()
		case <-l.n.stopping:
			l.abort()
			return
		}
		l.drainInputs()
		l.proposeBatch()
		for l.rn.HasReady() {
			if err := l.handleReady(l.rn.Ready()); err != nil {
				l.n.fail(err)
				l.abort()
				return
			}
		}
		// Only an earlier wake moves the timer: moving a pending timer later leaves the Go runtime a wakeup at
		// its old time, so a later one waits for this one to fire.
		if next := l.ticks.next(l.lazy()); wakeAt.IsZero() || next.Before(wakeAt) {
			timer.Reset(time.Until(next))
			wakeAt = next
		}
	}
}

// lazy reports whether raft is a follower with a leader, as its last Ready said: its ticks may wait (see
// tickClock). It reads what handleReady published, not raft's BasicStatus, which allocates: the loop asks at
// every turn.
func (l *raftLoop) lazy() bool { return !l.n.isLeader.Load() && l.n.lead.Load() != raft.None }

// tick hands raft the ticks it is owed at now.
func (l *raftLoop) tick(now time.Time) {
	if !l.ticks.owes(now) {
		return
	}
	for range l.ticks.due(now, l.lazy()) {
		l.rn.Tick()
	}
	l.traces.expire(now)
}

// drainInputs takes whatever else is already queued, so that one Ready (and one fsync) covers it all.
func (l *raftLoop) drainInputs() {
	for range maxDrain {
		select {
		case m := <-l.n.recvC:
			l.step(m)
		case p := <-l.n.proposeC:
			l.batch = append(l.batch, p)
		case f := <-l.n.controlC:
			f()
		default:
			return
		}
	}
}

func (l *raftLoop) step(m *raftpb.Message) {
	now := time.Now()
	l.tick(now) // raft's election count must be current: it decides whether a vote is granted
	if m.GetType() == raftpb.MsgHeartbeatResp && len(m.GetContext()) > 0 {
		l.n.reads.acknowledged(m.GetFrom(), m.GetContext())
	}
	if err := l.rn.Step(m); err != nil {
		l.n.log.Debug("raft refused message", "from", fmt.Sprintf("%x", m.GetFrom()), "type", m.GetType().String(), "err", err)
		return
	}
	if m.GetType() == raftpb.MsgHeartbeat {
		// A follower that took its leader's heartbeat of the current term has set its election count back to
		// zero. (Appends and snapshots do too, but the leader heartbeats every interval whether or not it
		// appends, so the heartbeats alone keep the grid, and only they pay for BasicStatus's allocations.)
		if st := l.rn.BasicStatus(); st.RaftState == raft.StateFollower && st.Lead == m.GetFrom() && st.GetTerm() == m.GetTerm() {
			l.ticks.restart(now)
		}
	}
}

// proposeBatch steps every queued proposal as one MsgProp and tells each proposer the outcome.
func (l *raftLoop) proposeBatch() {
	if len(l.batch) == 0 {
		return
	}
	batch := l.batch
	l.batch = l.batch[:0]
	st := l.rn.BasicStatus()
	if st.Lead == raft.None {
		l.finishBatch(batch, rpctypes.ErrGRPCNoLeader)
		return
	}
	ents := l.proposedEntries(batch, st.RaftState == raft.StateLeader)
	var sampled obs.Batch
	for _, p := range batch {
		if p.parent != nil {
			sampled.Add(p.parent)
		} else {
			sampled.AddCount(1)
		}
	}
	step := l.n.stages.StartBatch("consensus.raft_step", &sampled)
	err := l.rn.Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(l.n.memberID), Entries: ents})
	step.End()
	for _, e := range l.proposing {
		e.Data = nil // raft copied it; the proposer's buffer must not stay pinned here
	}
	if err != nil {
		l.finishBatch(batch, proposeError(err, st))
		return
	}
	for _, p := range batch {
		if p.span != nil {
			l.traces.add(p)
		}
	}
	l.finishBatch(batch, nil)
}

// proposedEntries returns the entries of a batch of proposals. A leader's raft copies every proposed entry into
// its log (raft.appendEntry), so a leader's are made from entries kept for the next batch; a follower forwards
// the message to the leader as it is, so its entries are new ones.
func (l *raftLoop) proposedEntries(batch []*proposal, leader bool) []*raftpb.Entry {
	if !leader || len(batch) > maxKeptProposals {
		ents := make([]*raftpb.Entry, len(batch))
		for i, p := range batch {
			ents[i] = &raftpb.Entry{Data: p.data}
		}
		return ents
	}
	for len(l.proposing) < len(batch) {
		l.proposing = append(l.proposing, &raftpb.Entry{})
	}
	ents := l.proposing[:len(batch)]
	for i, p := range batch {
		ents[i].Data = p.data
	}
	return ents
}

func (l *raftLoop) finishBatch(batch []*proposal, err error) {
	l.n.metrics.proposals(len(batch), err)
	for _, p := range batch {
		p.finish(err)
		*p = proposal{}
		l.n.proposals.Put(p)
	}
	clear(batch)
}

// proposeError maps raft's refusal to the error etcd would return.
func proposeError(err error, st raft.BasicStatus) error {
	if !errors.Is(err, raft.ErrProposalDropped) {
		return fmt.Errorf("consensus: propose: %w", err)
	}
	switch {
	case st.Lead == raft.None:
		return rpctypes.ErrGRPCNoLeader
	case st.LeadTransferee != raft.None:
		return rpctypes.ErrGRPCLeaderChanged
	default:
		// The leader's uncommitted log is full (MaxUncommittedEntriesSize).
		return rpctypes.ErrGRPCRequestTooManyRequests
	}
}

// abort fails whatever the loop still holds, or is still queued for it, when it stops.
func (l *raftLoop) abort() {
	for drained := false; !drained; {
		select {
		case p := <-l.n.proposeC:
			l.batch = append(l.batch, p)
		default:
			drained = true
		}
	}
	l.finishBatch(l.batch, rpctypes.ErrGRPCStopped)
	l.batch = nil
	l.traces.abort()
}

// handleReady processes one Ready. A leader sends its messages before its own fsync (raft thesis 10.2.1,
// allowed by raft's README); a follower only after, because its messages promise what it persisted.
// Committed entries that an earlier Ready already fsynced here are handed on before this Ready's fsync, so
// under load the answers to one batch do not wait for the next batch's fsync (etcd applies in parallel with
// its WAL write too); entries this fsync covers, conf changes and snapshots wait for it.
func (l *raftLoop) handleReady(rd raft.Ready) error {
	if rd.SoftState != nil {
		l.n.publishSoftState(rd.SoftState)
	}
	leader := l.n.isLeader.Load()
	if leader {
		l.n.reads.heartbeatsSent(rd.Messages)
		if err := l.freshenSnapshots(rd.Messages); err != nil {
			return err
		}
		sent := time.Now()
		l.n.transport.Send(rd.Messages)
		l.traces.stage("consensus.send", sent, len(rd.Messages))
		if len(rd.Messages) > 0 && rd.MustSync {
			// Let the transport put the appends on the wire before the fsync below holds this process's
			// one P: a yield runs the peers' senders, which write their links themselves.
			runtime.Gosched()
		}
	}
	early := l.deliverableBeforePersist(rd)
	if early {
		if err := l.applyCommitted(rd.CommittedEntries); err != nil {
			return err
		}
	}
	if err := l.persist(rd); err != nil {
		return err
	}
	if !leader {
		sent := time.Now()
		l.n.transport.Send(rd.Messages)
		l.traces.stage("consensus.send", sent, len(rd.Messages))
	}
	if !early {
		if err := l.applyCommitted(rd.CommittedEntries); err != nil {
			return err
		}
	}
	if len(rd.CommittedEntries) > 0 {
		if err := l.maybeSnapshot(); err != nil {
			return err
		}
	}
	if len(rd.ReadStates) > 0 {
		l.n.reads.deliver(rd.ReadStates)
	}
	l.rn.Advance(rd)
	return nil
}

// persist writes the Ready's snapshot, entries and HardState to the WAL with one fsync, then makes them
// visible to raft through its storage.
func (l *raftLoop) persist(rd raft.Ready) error {
	var snap *raftpb.Snapshot
	if !raft.IsEmptySnap(rd.Snapshot) {
		snap = rd.Snapshot
	}
	// The write and the fdatasync are timed apart: consensus.wal_append and consensus.wal_fsync, and the fsync
	// metric (etcd's wal_fsync_duration_seconds) times the fdatasync alone, as etcd's does.
	start := time.Now()
	if err := l.n.wal.Append(snap, rd.HardState, rd.Entries); err != nil {
		return fmt.Errorf("consensus: member %x: append to WAL: %w", l.n.memberID, err)
	}
	appended := start
	if l.traces.following() {
		appended = time.Now()
		l.traces.stageTo("consensus.wal_append", start, appended, len(rd.Entries))
	}
	if rd.MustSync {
		if err := l.n.wal.Sync(); err != nil {
			return fmt.Errorf("consensus: member %x: sync WAL: %w", l.n.memberID, err)
		}
		synced := time.Now()
		l.n.metrics.walFsync.Observe(synced.Sub(appended).Seconds())
		l.traces.stageTo("consensus.wal_fsync", appended, synced, len(rd.Entries))
	}
	if snap != nil {
		if err := l.installSnapshot(snap); err != nil {
			return err
		}
	}
	if rd.HardState != nil {
		if err := l.n.storage.SetHardState(rd.HardState); err != nil {
			return fmt.Errorf("consensus: set hard state: %w", err)
		}
		l.n.term.Store(rd.HardState.GetTerm())
		l.n.commitIndex.Store(rd.HardState.GetCommit())
	}
	if err := l.n.storage.Append(rd.Entries); err != nil {
		return fmt.Errorf("consensus: append %d entries to raft storage: %w", len(rd.Entries), err)
	}
	if snap != nil {
		l.persisted = snap.GetMetadata().GetIndex()
	}
	if len(rd.Entries) > 0 {
		l.persisted = rd.Entries[len(rd.Entries)-1].GetIndex()
	}
	return nil
}

// deliverableBeforePersist reports whether every committed entry of rd may be handed on before rd is
// persisted: all are normal entries already fsynced here by an earlier Ready, and rd installs no snapshot.
func (l *raftLoop) deliverableBeforePersist(rd raft.Ready) bool {
	ents := rd.CommittedEntries
	if len(ents) == 0 || !raft.IsEmptySnap(rd.Snapshot) || ents[len(ents)-1].GetIndex() > l.persisted {
		return false
	}
	for _, e := range ents {
		if t := e.GetType(); t == raftpb.EntryConfChange || t == raftpb.EntryConfChangeV2 {
			return false
		}
	}
	return true
}

// applyCommitted applies conf changes to raft and the membership, then makes the entries deliverable on
// Committed: they are committed and fsynced here (or, before persist, by an earlier Ready).
func (l *raftLoop) applyCommitted(ents []*raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	start := time.Now()
	var delivered obs.Batch
	for _, e := range ents {
		switch e.GetType() {
		case raftpb.EntryConfChange:
			l.applyConfChange(e)
		case raftpb.EntryConfChangeV2:
			// Cairn never proposes these; apply them so raft's configuration stays what the log says.
			cc := &raftpb.ConfChangeV2{}
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return fmt.Errorf("consensus: entry %d: bad ConfChangeV2: %w", e.GetIndex(), err)
			}
			l.recordConf(e.GetIndex(), l.rn.ApplyConfChange(cc))
		default:
			l.traces.committed(e, &delivered)
		}
	}
	last := ents[len(ents)-1].GetIndex()
	l.n.deliver.advance(last)
	l.n.metrics.appliedIndex.Set(float64(last))
	if delivered.Sampled() {
		delivered.AddCount(len(ents) - delivered.Size())
		span := l.n.stages.StartBatchAt("consensus.deliver", &delivered, start)
		span.SetAttributes(obs.AttrRaftIndex.Int64(int64(last)))
		span.End()
	}
	return nil
}

// applyConfChange applies one membership change. A change the membership refuses (it became invalid
// between proposing and applying) is applied to raft as a no-op, which raft's README allows because the
// decision depends only on the log.
func (l *raftLoop) applyConfChange(e *raftpb.Entry) {
	cc := &raftpb.ConfChange{}
	var change *consensuspb.MemberChange
	err := proto.Unmarshal(e.GetData(), cc)
	if err == nil {
		change, err = l.n.applyMemberChange(cc)
	}
	if err != nil {
		l.n.log.Warn("membership change refused", "index", e.GetIndex(), "node-id", fmt.Sprintf("%x", cc.GetNodeId()), "err", err)
		cc.NodeId = new(uint64(0))
	}
	l.recordConf(e.GetIndex(), l.rn.ApplyConfChange(cc))
	if err == nil {
		l.n.afterMemberChange(change)
	}
	l.n.changes.finish(change.GetRequestId(), err, l.n.sortedMembers)
}

// recordConf remembers the configuration from index on.
func (l *raftLoop) recordConf(index uint64, cs *raftpb.ConfState) {
	l.n.mu.RLock()
	members := l.n.members.clone()
	l.n.mu.RUnlock()
	l.confHistory = append(l.confHistory, confPoint{index: index, confState: cs, members: members})
}

// confAt returns the configuration in force at index.
func (l *raftLoop) confAt(index uint64) confPoint {
	point := l.confHistory[0]
	for _, p := range l.confHistory {
		if p.index > index {
			break
		}
		point = p
	}
	return point
}
