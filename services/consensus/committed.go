package consensus

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/cairn-kv/cairn/internal/commitlog"
)

// maxCommittedBatchBytes bounds one batch handed to a Committed callback.
const maxCommittedBatchBytes = 4 << 20

// deliverable is the highest index that is committed, fsynced here and applied by consensus (conf changes
// taken into the membership), so Committed may hand it out. Readers wait on notify for it to move.
type deliverable struct {
	mu      sync.Mutex
	highest uint64
	notify  chan struct{}
}

func newDeliverable() *deliverable { return &deliverable{notify: make(chan struct{})} }

func (d *deliverable) index() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.highest
}

// state returns the index and a channel closed when it next changes.
func (d *deliverable) state() (uint64, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.highest, d.notify
}

// advance raises the index to at least i.
func (d *deliverable) advance(i uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if i > d.highest {
		d.highest = i
		close(d.notify)
		d.notify = make(chan struct{})
	}
}

// wait returns once the index reaches i, or with ctx's error, or errStopped once stopping closes.
func (d *deliverable) wait(ctx context.Context, i uint64, stopping <-chan struct{}) error {
	for {
		highest, changed := d.state()
		if highest >= i {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-stopping:
			return errStopped
		}
	}
}

// reset sets the index to a received snapshot's (always above the current one, as raft only installs
// snapshots ahead of its commit index).
func (d *deliverable) reset(i uint64) { d.advance(i) }

// Committed implements commitlog.Log. Entries come straight from raft's storage, which keeps every entry
// the log was not compacted past; below that, a KindSnapshot entry stands for the compacted prefix. An
// entry's Data is the log's own copy: the caller may keep it but must not modify it.
func (n *Node) Committed(ctx context.Context, fromIndex uint64, deliver func([]commitlog.Entry) error) error {
	next := max(fromIndex, 1)
	var kept []commitlog.Entry // deliver does not keep a batch: its slice serves the next one
	for {
		if err := n.deliver.wait(ctx, next, n.stopping); err != nil {
			return err
		}
		batch, after, err := n.readCommitted(next, n.deliver.index(), kept[:0])
		if err != nil {
			return err
		}
		if len(batch) > 0 {
			if err := deliver(batch); err != nil {
				return err
			}
		}
		clear(batch) // not to pin the entries' data
		if cap(batch) <= maxKeptCommittedBatch {
			kept = batch
		}
		next = after
	}
}

// maxKeptCommittedBatch bounds the entries of the batch slice Committed keeps for the next batch.
const maxKeptCommittedBatch = 4096

// readCommitted reads committed entries from next up to available, and returns them, appended to batch, with
// the index to read next. When next was compacted away it returns the snapshot entry instead.
func (n *Node) readCommitted(next, available uint64, batch []commitlog.Entry) ([]commitlog.Entry, uint64, error) {
	first, err := n.storage.FirstIndex()
	if err != nil {
		return nil, next, fmt.Errorf("consensus: raft storage first index: %w", err)
	}
	if next < first {
		snap, err := n.storage.Snapshot()
		if err != nil {
			return nil, next, fmt.Errorf("consensus: raft storage snapshot: %w", err)
		}
		e, err := snapshotEntry(snap)
		if err != nil {
			return nil, next, err
		}
		return append(batch, e), e.Index + 1, nil
	}
	ents, err := n.storage.entries(next, available+1, maxCommittedBatchBytes)
	if errors.Is(err, raft.ErrCompacted) {
		return nil, next, nil // compacted meanwhile: the next round returns the snapshot
	}
	if err != nil {
		return nil, next, fmt.Errorf("consensus: read entries %d..%d: %w", next, available, err)
	}
	for _, e := range ents {
		batch = append(batch, committedEntry(e))
	}
	return batch, next + uint64(len(ents)), nil
}

func committedEntry(e *raftpb.Entry) commitlog.Entry {
	out := commitlog.Entry{Index: e.GetIndex(), Term: e.GetTerm(), Data: e.GetData()}
	switch {
	case e.GetType() == raftpb.EntryConfChange || e.GetType() == raftpb.EntryConfChangeV2:
		out.Kind = commitlog.KindConfChange
	case len(e.GetData()) == 0:
		out.Kind = commitlog.KindEmpty
	default:
		out.Kind = commitlog.KindNormal
	}
	return out
}
