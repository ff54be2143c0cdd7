package commitlog

import "context"

// Kind says what a committed entry carries.
type Kind uint8

const (
	// KindNormal is a proposed payload; Data holds exactly the bytes given to Propose.
	KindNormal Kind = iota
	// KindEmpty is the empty entry a new leader appends; it has no Data.
	KindEmpty
	// KindConfChange is a membership change, already applied by consensus; Data is the raw raftpb.ConfChange
	// (or ConfChangeV2) for information. Storage only advances its applied index past it.
	KindConfChange
	// KindSnapshot tells storage to replace its whole state with the storage snapshot that Snapshot
	// describes before applying any later entry.
	KindSnapshot
)

// String names the kind for logs.
func (k Kind) String() string {
	switch k {
	case KindNormal:
		return "normal"
	case KindEmpty:
		return "empty"
	case KindConfChange:
		return "conf-change"
	case KindSnapshot:
		return "snapshot"
	default:
		return "unknown"
	}
}

// Entry is one committed log entry.
type Entry struct {
	Index uint64
	Term  uint64
	Kind  Kind
	// Data is the proposed payload (KindNormal) or the raw conf change (KindConfChange).
	Data []byte
	// Snapshot is set for KindSnapshot only.
	Snapshot *SnapshotRef
}

// SnapshotRef points at a storage state to install in place of the log up to Index.
//
// The source storage may by then have applied past Index; that is fine, because a storage's applied index is
// stored with its data and re-applying an entry at or below it is a no-op.
type SnapshotRef struct {
	// Index and Term are those of the last log entry the snapshot covers.
	Index uint64
	Term  uint64
	// SourceMemberID is the member whose storage holds the state.
	SourceMemberID uint64
	// SourceStorageURL is where that storage serves its Snapshot stream (for example http://127.0.0.1:23790).
	SourceStorageURL string
}

// Member describes one member of the cluster as consensus knows it.
type Member struct {
	ID         uint64
	Name       string
	PeerURLs   []string
	ClientURLs []string
	// StorageURL is where this member's storage serves its internal API.
	StorageURL string
	IsLearner  bool
}

// Status is a point-in-time view of this member's consensus.
type Status struct {
	MemberID    uint64
	ClusterID   uint64
	Term        uint64
	Leader      uint64 // 0 when there is no leader
	CommitIndex uint64
	// AppliedIndex is the highest index consensus has handed to Committed (not the storage's applied index).
	AppliedIndex uint64
	IsLearner    bool
	Members      []Member
}

// Log is what storage needs from consensus.
type Log interface {
	// Propose hands data to consensus for replication. It returns nil once consensus has accepted the proposal
	// (not once it is committed: the caller learns that from Committed), or an error when it is refused:
	// no leader, too large, or dropped. The trace context in ctx travels with the proposal.
	Propose(ctx context.Context, data []byte) error

	// Committed calls deliver with batches of committed entries, starting at fromIndex, in order, until ctx ends
	// or deliver returns an error (which Committed then returns). deliver must not keep the slice after it
	// returns. A slow deliver slows the stream; it never causes entries to be skipped.
	Committed(ctx context.Context, fromIndex uint64, deliver func([]Entry) error) error

	// ReadIndex returns a commit index that a quorum confirmed this member's leader still held at the time of
	// the call: once the storage has applied up to it, a local read is linearizable.
	ReadIndex(ctx context.Context) (uint64, error)

	// Compact tells consensus that storage has durably (fsynced) applied every entry up to appliedIndex, so the
	// log may be compacted below it, and any KindSnapshot at or below it has been installed.
	Compact(ctx context.Context, appliedIndex uint64) error

	// Status reports this member's consensus state.
	Status(ctx context.Context) (Status, error)
}

// AsyncProposer is a Log whose proposals need not be waited for: a remote log (consensusclient) implements it
// so that a proposer keeps no goroutine per proposal in flight.
type AsyncProposer interface {
	// ProposeThen is Propose that returns at once (or once the log has room, as Propose would wait for it);
	// done is called once with what Propose would have returned, possibly on another goroutine, and must not
	// block.
	ProposeThen(ctx context.Context, data []byte, done func(error))
}
