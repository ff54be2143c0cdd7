package consensus

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/commitlog"
)

// A raft snapshot here holds no state: its data is a SnapshotData naming the member whose storage holds
// the state at the snapshot's index, plus the membership at that index.

func encodeSnapshotData(sourceID uint64, storageURL string, ms *membership) ([]byte, error) {
	data := &consensuspb.SnapshotData{
		SourceMemberId: sourceID, SourceStorageUrl: storageURL, Members: ms.sorted(),
		RemovedIds: slices.Sorted(maps.Keys(ms.removed)),
	}
	return proto.Marshal(data)
}

func decodeSnapshotData(snap *raftpb.Snapshot) (*consensuspb.SnapshotData, error) {
	data := &consensuspb.SnapshotData{}
	if err := proto.Unmarshal(snap.GetData(), data); err != nil {
		return nil, fmt.Errorf("consensus: snapshot at %d: bad data: %w", snap.GetMetadata().GetIndex(), err)
	}
	return data, nil
}

func membershipOfSnapshot(snap *raftpb.Snapshot) (*membership, error) {
	data, err := decodeSnapshotData(snap)
	if err != nil {
		return nil, err
	}
	ms := newMembership()
	for _, m := range data.GetMembers() {
		ms.members[m.GetId()] = m
	}
	for _, id := range data.GetRemovedIds() {
		ms.removed[id] = true
	}
	return ms, nil
}

// snapshotEntry is the KindSnapshot entry that stands for the log up to snap's index.
func snapshotEntry(snap *raftpb.Snapshot) (commitlog.Entry, error) {
	data, err := decodeSnapshotData(snap)
	if err != nil {
		return commitlog.Entry{}, err
	}
	md := snap.GetMetadata()
	return commitlog.Entry{
		Index: md.GetIndex(), Term: md.GetTerm(), Kind: commitlog.KindSnapshot,
		Snapshot: &commitlog.SnapshotRef{
			Index: md.GetIndex(), Term: md.GetTerm(),
			SourceMemberID: data.GetSourceMemberId(), SourceStorageURL: data.GetSourceStorageUrl(),
		},
	}, nil
}

// Compact implements commitlog.Log: storage has durably applied up to appliedIndex. Once SnapshotCount
// entries have been applied since the last snapshot, consensus takes a new one there and compacts its
// log, keeping SnapshotCatchUpEntries below it.
func (n *Node) Compact(ctx context.Context, appliedIndex uint64) error {
	return n.control(ctx, func() {
		if err := n.loop.compact(appliedIndex); err != nil {
			n.fail(err)
		}
	})
}

func (l *raftLoop) compact(appliedIndex uint64) error {
	l.storageApplied = max(l.storageApplied, appliedIndex)
	return l.maybeSnapshot()
}

// snapshotIndex is the highest index a snapshot may be taken at: storage has durably applied it and
// consensus has delivered it.
func (l *raftLoop) snapshotIndex() uint64 { return min(l.storageApplied, l.n.deliver.index()) }

func (l *raftLoop) currentSnapshot() (*raftpb.Snapshot, error) {
	snap, err := l.n.storage.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("consensus: read raft snapshot: %w", err)
	}
	return snap, nil
}

// maybeSnapshot takes a snapshot once SnapshotCount entries were applied since the last one saved to the WAL,
// and moves the catch-up window up to SnapshotCatchUpEntries below it. Between two, once the window holds
// trimSlack entries more than that below the applied index, it moves the window again, with a snapshot kept in
// memory only (it holds no state, and the WAL still replays from its own). Entries of the window below the
// newest LogEntriesInMemory are read back from the WAL (logStore): the log's memory, most of a consensus
// process's live heap under writes, stays that of those entries, and followers still catch up from every
// entry of the window.
func (l *raftLoop) maybeSnapshot() error {
	index := l.snapshotIndex()
	current, err := l.currentSnapshot()
	if err != nil {
		return err
	}
	if index <= current.GetMetadata().GetIndex() {
		return nil
	}
	first, err := l.n.storage.FirstIndex()
	if err != nil {
		return fmt.Errorf("consensus: raft storage first index: %w", err)
	}
	catchUp := l.n.cfg.SnapshotCatchUpEntries
	switch {
	case index-l.walSnapshot >= l.n.cfg.SnapshotCount:
		if _, err := l.takeSnapshot(index); err != nil {
			return err
		}
	case index >= first+catchUp+trimSlack(catchUp):
		if _, err := l.recordSnapshot(index); err != nil {
			return err
		}
	default:
		return l.trimMemory(index)
	}
	compactIndex := uint64(0)
	if index > catchUp {
		compactIndex = index - catchUp
	}
	if compactIndex >= first {
		l.n.storage.forget(compactIndex + 1)
		if l.walSnapshot > 0 {
			// The segments that held only the entries below the window go now, not at the next snapshot.
			if err := l.n.wal.ReleaseTo(l.walSnapshot); err != nil {
				return err
			}
		}
	}
	if err := l.trimMemory(index); err != nil {
		return err
	}
	level := slog.LevelDebug
	if l.walSnapshot == index {
		level = slog.LevelInfo
	}
	l.n.log.Log(context.Background(), level, "compacted the log", "member-id", fmt.Sprintf("%x", l.n.memberID),
		"snapshot-index", index, "compacted-index", compactIndex, "saved", l.walSnapshot == index)
	return nil
}

// trimMemory drops from memory the entries more than LogEntriesInMemory (at most SnapshotCatchUpEntries)
// below index, once memory holds memorySlack more.
func (l *raftLoop) trimMemory(index uint64) error {
	keep := min(l.n.cfg.LogEntriesInMemory, l.n.cfg.SnapshotCatchUpEntries)
	if keep == 0 {
		keep = min(DefaultLogEntriesInMemory, l.n.cfg.SnapshotCatchUpEntries)
	}
	if index < l.n.storage.memoryFirst()+keep+memorySlack(keep) {
		return nil
	}
	return l.n.storage.trimMemory(index - keep)
}

// trimSlack is how many entries more than catchUp the window may hold below the applied index before it
// moves: a quarter of catchUp, and at least minTrimSlack, so a move (a snapshot in memory) comes at most every
// so many entries.
func trimSlack(catchUp uint64) uint64 { return max(catchUp/4, minTrimSlack) }

const minTrimSlack = 1000

// memorySlack is how many entries more than keep memory may hold below the applied index before it is
// trimmed (a trim copies the kept entries' pointers): half of keep, and at least minMemorySlack.
func memorySlack(keep uint64) uint64 { return max(keep/2, minMemorySlack) }

const minMemorySlack = 100

// takeSnapshot records a raft snapshot at index, which must be above the current one, saves it to the WAL and
// releases the WAL segments it covers.
func (l *raftLoop) takeSnapshot(index uint64) (*raftpb.Snapshot, error) {
	snap, err := l.recordSnapshot(index)
	if err != nil {
		return nil, err
	}
	if err := l.n.wal.SaveSnapshot(snap); err != nil {
		return nil, fmt.Errorf("consensus: member %x: save snapshot at %d: %w", l.n.memberID, index, err)
	}
	if err := l.n.wal.ReleaseTo(index); err != nil {
		return nil, err
	}
	l.walSnapshot = index
	l.pruneConfHistory(index)
	return snap, nil
}

// recordSnapshot records a raft snapshot at index, which must be above the current one, in raft's storage
// only: what raft sends a follower the log no longer has, and what Committed delivers below the log.
func (l *raftLoop) recordSnapshot(index uint64) (*raftpb.Snapshot, error) {
	point := l.confAt(index)
	data, err := encodeSnapshotData(l.n.memberID, l.n.cfg.AdvertiseStorageURL, point.members)
	if err != nil {
		return nil, fmt.Errorf("consensus: encode snapshot data: %w", err)
	}
	snap, err := l.n.storage.CreateSnapshot(index, point.confState, data)
	if err != nil {
		return nil, fmt.Errorf("consensus: create snapshot at %d: %w", index, err)
	}
	return snap, nil
}

// freshenSnapshots replaces the snapshot raft is about to send with one at the newest index storage has
// applied, as etcd sends a snapshot of its current state: the stored snapshot may predate the recipient's
// own membership (a member added after it), which the recipient would refuse.
func (l *raftLoop) freshenSnapshots(msgs []*raftpb.Message) error {
	for _, m := range msgs {
		if m.GetType() != raftpb.MsgSnap {
			continue
		}
		index := l.snapshotIndex()
		if index <= m.GetSnapshot().GetMetadata().GetIndex() {
			continue
		}
		snap, err := l.currentSnapshot()
		if err != nil {
			return err
		}
		if snap.GetMetadata().GetIndex() < index {
			if snap, err = l.takeSnapshot(index); err != nil {
				return err
			}
		}
		m.Snapshot = snap
	}
	return nil
}

// pruneConfHistory forgets configurations no future snapshot (at or above index) can need.
func (l *raftLoop) pruneConfHistory(index uint64) {
	keep := 0
	for i, p := range l.confHistory {
		if p.index <= index {
			keep = i
		}
	}
	l.confHistory = slices.Clone(l.confHistory[keep:])
}

// installSnapshot adopts a snapshot received from the leader: it replaces raft's log, the membership and
// the configuration history, and makes the snapshot deliverable (Committed hands storage a KindSnapshot).
func (l *raftLoop) installSnapshot(snap *raftpb.Snapshot) error {
	index := snap.GetMetadata().GetIndex()
	members, err := membershipOfSnapshot(snap)
	if err != nil {
		return err
	}
	if err := l.n.storage.ApplySnapshot(snap); err != nil {
		return fmt.Errorf("consensus: apply snapshot at %d: %w", index, err)
	}
	l.n.mu.Lock()
	old := l.n.members
	l.n.members = members.clone()
	l.n.mu.Unlock()
	l.confHistory = []confPoint{{index: index, confState: snap.GetMetadata().GetConfState(), members: members}}
	l.n.syncPeers(old, members)
	l.n.deliver.reset(index)
	l.walSnapshot = index // persist saved it
	l.n.log.Info("installed a snapshot from the leader", "member-id", fmt.Sprintf("%x", l.n.memberID),
		"snapshot-index", index, "snapshot-term", snap.GetMetadata().GetTerm())
	return l.n.wal.ReleaseTo(index)
}
