package consensustest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cairn-kv/cairn/internal/commitlog"
)

// Machines finds state machines by member ID; it stands in for storage's Snapshot stream between members.
type Machines struct {
	mu   sync.Mutex
	byID map[uint64]*StateMachine
}

// NewMachines returns an empty registry.
func NewMachines() *Machines { return &Machines{byID: map[uint64]*StateMachine{}} }

func (ms *Machines) register(sm *StateMachine) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.byID[sm.memberID] = sm
}

func (ms *Machines) get(id uint64) *StateMachine {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.byID[id]
}

// AppliedEntry is one normal entry a state machine applied.
type AppliedEntry struct {
	Index, Term uint64
	Data        string
}

// StateMachine applies a member's committed log the way storage does: in order, without holes, replacing
// its state from the named source on KindSnapshot, and reporting what it applied through Compact. Its
// state is the list of normal entries applied, kept in memory.
type StateMachine struct {
	memberID uint64
	log      commitlog.Log
	machines *Machines

	mu        sync.Mutex
	applied   uint64
	entries   []AppliedEntry
	snapshots int
}

// NewStateMachine returns a state machine for member memberID reading log, registered in machines.
func NewStateMachine(memberID uint64, log commitlog.Log, machines *Machines) *StateMachine {
	sm := &StateMachine{memberID: memberID, log: log, machines: machines}
	machines.register(sm)
	return sm
}

// Run applies the committed log until ctx ends or the log fails.
func (sm *StateMachine) Run(ctx context.Context) error {
	return sm.log.Committed(ctx, sm.Applied()+1, func(batch []commitlog.Entry) error {
		for _, e := range batch {
			if err := sm.apply(ctx, e); err != nil {
				return err
			}
		}
		return sm.log.Compact(ctx, sm.Applied())
	})
}

func (sm *StateMachine) apply(ctx context.Context, e commitlog.Entry) error {
	if e.Kind == commitlog.KindSnapshot {
		return sm.install(ctx, e.Snapshot)
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	switch {
	case e.Index <= sm.applied:
		return nil // covered by an installed snapshot
	case e.Index != sm.applied+1:
		return fmt.Errorf("state machine %x: entry %d after %d: a hole in the log", sm.memberID, e.Index, sm.applied)
	}
	if e.Kind == commitlog.KindNormal {
		sm.entries = append(sm.entries, AppliedEntry{Index: e.Index, Term: e.Term, Data: string(e.Data)})
	}
	sm.applied = e.Index
	return nil
}

// install copies the source member's state once it has applied at least the snapshot's index.
func (sm *StateMachine) install(ctx context.Context, ref *commitlog.SnapshotRef) error {
	src := sm.machines.get(ref.SourceMemberID)
	if src == nil {
		return fmt.Errorf("state machine %x: snapshot source %x unknown", sm.memberID, ref.SourceMemberID)
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for src.Applied() < ref.Index {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	applied, entries := src.State()
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.applied, sm.entries = applied, entries
	sm.snapshots++
	return nil
}

// Applied is the highest index applied.
func (sm *StateMachine) Applied() uint64 {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.applied
}

// State returns the applied index and a copy of the applied entries.
func (sm *StateMachine) State() (uint64, []AppliedEntry) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.applied, append([]AppliedEntry(nil), sm.entries...)
}

// SnapshotsInstalled counts the snapshots this machine installed.
func (sm *StateMachine) SnapshotsInstalled() int {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.snapshots
}
