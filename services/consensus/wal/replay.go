package wal

import (
	"bytes"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
)

// replay folds records, in WAL order, into the state they describe.
type replay struct {
	metadata  []byte
	haveMeta  bool
	hardState *raftpb.HardState
	snapshot  *raftpb.Snapshot
	entries   []*raftpb.Entry
	locs      []entryLoc // where each of entries' records lies
}

func newReplay() *replay {
	return &replay{hardState: &raftpb.HardState{}, snapshot: raftpb.EnsureSnapshot(nil)}
}

// apply folds rec, read from segment seq.
func (r *replay) apply(rec record, seq uint64) error {
	switch rec.typ {
	case recordMetadata:
		if r.haveMeta && !bytes.Equal(r.metadata, rec.payload) {
			return errors.New("segments carry different metadata")
		}
		r.metadata, r.haveMeta = append([]byte(nil), rec.payload...), true
	case recordEntry:
		e, err := decodeEntry(rec.payload)
		if err != nil {
			return err
		}
		return r.appendEntry(e, entryLoc{off: int64(rec.off), term: e.GetTerm(), seq: uint32(seq),
			size: uint32(headerSize + len(rec.payload))})
	case recordHardState:
		hs, err := decodeHardState(rec.payload)
		if err != nil {
			return err
		}
		r.hardState = hs
	case recordSnapshot:
		snap, discardsLog, err := decodeSnapshot(rec.payload)
		if err != nil {
			return err
		}
		r.applySnapshot(snap, discardsLog)
	}
	return nil
}

// appendEntry follows raft's rule: an entry at index i replaces the entries from i on.
func (r *replay) appendEntry(e *raftpb.Entry, loc entryLoc) error {
	index := e.GetIndex()
	snapIndex := r.snapshot.GetMetadata().GetIndex()
	if index <= snapIndex {
		return nil
	}
	if len(r.entries) > 0 && index <= r.lastIndex() {
		first := r.entries[0].GetIndex()
		if index <= first {
			r.entries, r.locs = r.entries[:0], r.locs[:0]
		} else {
			r.entries, r.locs = r.entries[:index-first], r.locs[:index-first]
		}
	}
	// The first entry may start anywhere: older segments may have been released below a snapshot that a
	// later segment records. state checks that the entries end up adjoining the snapshot.
	if want := r.lastIndex() + 1; len(r.entries) > 0 && index != want {
		return fmt.Errorf("entry %d follows index %d: entries are missing", index, want-1)
	}
	r.entries, r.locs = append(r.entries, e), append(r.locs, loc)
	return nil
}

func (r *replay) applySnapshot(snap *raftpb.Snapshot, discardsLog bool) {
	index := snap.GetMetadata().GetIndex()
	if discardsLog {
		r.entries, r.locs = nil, nil
	} else {
		kept, keptLocs := r.entries[:0], r.locs[:0]
		for i, e := range r.entries {
			if e.GetIndex() > index {
				kept, keptLocs = append(kept, e), append(keptLocs, r.locs[i])
			}
		}
		r.entries, r.locs = kept, keptLocs
	}
	if index >= r.snapshot.GetMetadata().GetIndex() {
		r.snapshot = snap
	}
}

// lastIndex is the index of the last entry, or the snapshot's when there are none.
func (r *replay) lastIndex() uint64 {
	if len(r.entries) > 0 {
		return r.entries[len(r.entries)-1].GetIndex()
	}
	return r.snapshot.GetMetadata().GetIndex()
}

func (r *replay) state() (*State, error) {
	snapIndex := r.snapshot.GetMetadata().GetIndex()
	if len(r.entries) > 0 && r.entries[0].GetIndex() != snapIndex+1 {
		return nil, fmt.Errorf("entries start at %d but the snapshot ends at %d: entries are missing",
			r.entries[0].GetIndex(), snapIndex)
	}
	hs := r.hardState
	// A snapshot implies its index is committed, even if the HardState saying so was torn off.
	// If the term has to rise too, the vote is dropped: it was cast in an older term.
	if hs.GetCommit() < snapIndex {
		term, vote := hs.GetTerm(), hs.GetVote()
		if snapTerm := r.snapshot.GetMetadata().GetTerm(); snapTerm > term {
			term, vote = snapTerm, 0
		}
		hs = &raftpb.HardState{Term: new(term), Vote: new(vote), Commit: new(snapIndex)}
	}
	return &State{Metadata: r.metadata, HardState: hs, Snapshot: r.snapshot, Entries: r.entries}, nil
}

// index locates the entries of state: they follow the snapshot (state checked that).
func (r *replay) index() entryIndex {
	md := r.snapshot.GetMetadata()
	return entryIndex{first: md.GetIndex() + 1, prevTerm: md.GetTerm(), prevKnown: true, locs: r.locs}
}
