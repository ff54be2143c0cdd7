package mvcc

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/authstate"
)

// Bucket and meta key names in the bbolt file.
var (
	bucketKey   = []byte("key")
	bucketMeta  = []byte("meta")
	bucketLease = []byte("lease")
	bucketAlarm = []byte("alarm")

	metaConsistentIndex  = []byte("consistent_index")
	metaTerm             = []byte("term")
	metaCurrentRev       = []byte("current_revision")
	metaScheduledCompact = []byte("scheduled_compact_revision")
	metaFinishedCompact  = []byte("finished_compact_revision")
	metaKeeperState      = []byte("keeper_state")
)

// ErrClosed is returned by a Store after Close.
var ErrClosed = errors.New("mvcc: store closed")

// Config configures a Store. Zero fields take the defaults below.
type Config struct {
	// Path is the bbolt file; it is created if missing.
	Path string
	// BatchInterval is the longest applied entries wait before their bbolt commit (default 100ms).
	BatchInterval time.Duration
	// BatchLimit is the most entries applied in one bbolt transaction (default 10000).
	BatchLimit int
	// CompactionBatchLimit is how many revisions physical compaction visits per batch (default 1000), and
	// CompactionSleepInterval the pause between batches (default 10ms), so compaction does not stall applies.
	CompactionBatchLimit    int
	CompactionSleepInterval time.Duration
	// MinLeaseTTL is the smallest TTL a lease is granted with, in seconds (default 2, etcd's with its default
	// election timeout).
	MinLeaseTTL int64
	// InitialMmapSize is bbolt's initial mmap size (default 10 GiB, as etcd): while the file fits, a commit never
	// waits for open read transactions (snapshots, hashes) to finish.
	InitialMmapSize int
	// Logger receives operator logs (default slog.Default()).
	Logger *slog.Logger
	// OnCommit, when set, is called after each successful bbolt commit with the durable consistent index, how many
	// entries the commit wrote, and when the bbolt commit (with its fsync) started and ended. It runs with the
	// write lock held: it must not block.
	OnCommit func(durableIndex uint64, entries int, start, end time.Time)
	// OnFailure, when set, is called once when the store fails (a bbolt commit or write failed). It must not block.
	OnFailure func(err error)
	// Opener, when set, turns a stored value of key into its plain value: values are stored sealed (see
	// internal/seal). Ranges return opened values and value compares compare opened values (the stored value and
	// the compare's own, sealed by the proposer too); everything else (applied events, History, hashes,
	// snapshots) keeps the stored bytes. nil: values are stored plain.
	Opener ValueOpener
}

// ValueOpener opens the values of a store whose values are stored sealed (Config.Opener).
type ValueOpener interface {
	// AppendOpen appends the plain value of stored, the stored value of key, to dst (with dst nil it may return
	// stored itself when that is plain); exactly OpenedLen(stored) bytes.
	AppendOpen(dst, key, stored []byte) ([]byte, error)
	// OpenedLen is the length of the plain value of stored (key's), known before opening it: RangeEncoded
	// sizes its answer with it and opens each value straight into that answer.
	OpenedLen(key, stored []byte) (int, error)
}

func (c Config) withDefaults() Config {
	if c.BatchInterval <= 0 {
		c.BatchInterval = 100 * time.Millisecond
	}
	if c.BatchLimit <= 0 {
		c.BatchLimit = 10000
	}
	if c.CompactionBatchLimit <= 0 {
		c.CompactionBatchLimit = 1000
	}
	if c.CompactionSleepInterval <= 0 {
		c.CompactionSleepInterval = 10 * time.Millisecond
	}
	if c.MinLeaseTTL <= 0 {
		c.MinLeaseTTL = 2
	}
	if c.InitialMmapSize <= 0 {
		c.InitialMmapSize = 10 << 30
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Store is the MVCC state machine on one bbolt file. All methods are safe for concurrent use; Apply and ApplyNoop
// must be called in log order by one caller.
type Store struct {
	cfg Config
	db  *bolt.DB
	log *slog.Logger

	// batchMu serialises every use of the bbolt write transaction: applies, physical compaction, commits.
	batchMu sync.Mutex
	wtx     *bolt.Tx
	dirty   bool // wtx holds changes (or an advanced consistent index) not yet committed
	// dirtied wakes the committer when dirty becomes true (buffered, 1): an idle store has no timer running.
	dirtied        chan struct{}
	pendingEntries int // entries applied into wtx
	lastCommit     time.Time
	// committedSize is the bbolt file's size as of the last commit (what etcd's quota check reads).
	committedSize atomic.Int64

	// mu guards the state readers see. Apply holds it exclusively for one whole entry; readers hold it shared for
	// a whole read, so a read sees every entry applied before it and none in part.
	mu            sync.RWMutex
	index         *keyIndex
	currentRev    int64
	compactRev    int64 // scheduled compact revision: reads below it fail
	appliedIndex  uint64
	appliedTerm   uint64
	durableIndex  uint64
	committedRev  int64       // revisions above it live in pending until the next commit
	pending       []pendingKV // every key-bucket write since the last commit, in revision order
	leases        map[int64]*leaseState
	keeper        *storagepb.KeeperState // the leasekeeper claim; never nil
	alarms        []*pb.AlarmMember
	auth          *authstate.State // users, roles, enabled flag and auth revision; never nil
	failed        error
	closed        bool
	compactor     *compactor
	hashes        compactHashes // recorded by the compactor, newest last
	stopCommitter chan struct{}
	committerDone chan struct{}
}

type pendingKV struct {
	rev   revision
	key   []byte // revision key
	value []byte // marshalled mvccpb.KeyValue
}

// Open opens (or creates) the store at cfg.Path and rebuilds its in-memory index from it. A compaction that was
// scheduled but not finished is resumed.
func Open(cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	db, err := bolt.Open(cfg.Path, 0o600, &bolt.Options{
		Timeout:         5 * time.Second,
		InitialMmapSize: cfg.InitialMmapSize,
		FreelistType:    bolt.FreelistMapType,
		NoFreelistSync:  true,
	})
	if err != nil {
		return nil, fmt.Errorf("open bbolt %s: %w", cfg.Path, err)
	}
	s := &Store{
		cfg:           cfg,
		db:            db,
		log:           cfg.Logger,
		index:         newKeyIndex(),
		leases:        make(map[int64]*leaseState),
		keeper:        &storagepb.KeeperState{},
		auth:          authstate.New(),
		currentRev:    1,
		dirtied:       make(chan struct{}, 1),
		stopCommitter: make(chan struct{}),
		committerDone: make(chan struct{}),
		lastCommit:    time.Now(),
	}
	finishedCompact, err := s.restore()
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("restore %s: %w", cfg.Path, err)
	}
	if s.wtx, err = db.Begin(true); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("begin bbolt write tx on %s: %w", cfg.Path, err)
	}
	s.committedSize.Store(s.wtx.Size())
	s.compactor = newCompactor(s)
	if s.compactRev > finishedCompact {
		// Resumed: revisions it had removed before the restart are gone, so its hash would differ; not recorded.
		s.compactor.schedule(compaction{rev: s.compactRev, prevRev: finishedCompact, keep: s.index.compact(s.compactRev)}, nil)
	}
	go s.runCommitter()
	s.log.Info("mvcc store opened", "path", cfg.Path, "applied_index", s.appliedIndex, "revision", s.currentRev,
		"compact_revision", s.compactRev, "keys", s.index.tree.Len(), "leases", len(s.leases))
	return s, nil
}

// restore loads meta, leases, alarms and the key index from bbolt, creating the buckets if missing.
func (s *Store) restore() (finishedCompact int64, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketKey, bucketMeta, bucketLease, bucketAlarm, bucketAuth, bucketAuthUsers,
			bucketAuthRoles} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return writeVersions(tx.Bucket(bucketMeta))
	})
	if err != nil {
		return 0, err
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		s.appliedIndex = readUint64(meta, metaConsistentIndex)
		s.appliedTerm = readUint64(meta, metaTerm)
		if rev := int64(readUint64(meta, metaCurrentRev)); rev > 0 {
			s.currentRev = rev
		}
		s.compactRev = int64(readUint64(meta, metaScheduledCompact))
		finishedCompact = int64(readUint64(meta, metaFinishedCompact))
		if v := meta.Get(metaKeeperState); v != nil {
			if err := proto.Unmarshal(v, s.keeper); err != nil {
				return fmt.Errorf("decode keeper state: %w", err)
			}
		}
		if err := s.restoreKeys(tx.Bucket(bucketKey)); err != nil {
			return err
		}
		if err := s.restoreLeases(tx.Bucket(bucketLease)); err != nil {
			return err
		}
		if err := s.restoreAuth(tx); err != nil {
			return err
		}
		return s.restoreAlarms(tx.Bucket(bucketAlarm))
	})
	if err != nil {
		return 0, err
	}
	if s.compactRev > 0 {
		s.index.compact(s.compactRev)
	}
	s.durableIndex = s.appliedIndex
	s.committedRev = s.currentRev
	return finishedCompact, nil
}

func (s *Store) restoreKeys(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		rev, tombstone, err := parseRevKey(k)
		if err != nil {
			return err
		}
		if len(v) == 0 {
			// etcdutl's --bump-revision marker: a revision with no key.
			s.currentRev = max(s.currentRev, rev.main)
			return nil
		}
		var kv mvccpb.KeyValue
		if err := proto.Unmarshal(v, &kv); err != nil {
			return fmt.Errorf("decode key revision %d.%d: %w", rev.main, rev.sub, err)
		}
		s.index.restore(kv.Key, keyVersion{rev: rev, created: kv.CreateRevision, version: kv.Version,
			lease: kv.Lease, tombstone: tombstone})
		if rev.main > s.currentRev {
			s.currentRev = rev.main
		}
		return nil
	})
}

func (s *Store) restoreLeases(b *bolt.Bucket) error {
	err := b.ForEach(func(_, v []byte) error {
		var rec storagepb.LeaseRecord
		if err := proto.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("decode lease record: %w", err)
		}
		s.leases[rec.Id] = &leaseState{ttl: rec.Ttl, remainingTTL: rec.RemainingTtl, checkpointIndex: rec.CheckpointIndex,
			keys: map[string]struct{}{}}
		return nil
	})
	if err != nil {
		return err
	}
	s.index.tree.Ascend(func(h *keyHistory) bool {
		if kv, ok := h.latest(); ok && kv.lease != 0 {
			if l := s.leases[kv.lease]; l != nil {
				l.keys[string(h.key)] = struct{}{}
			}
		}
		return true
	})
	return nil
}

// writeVersions records the storage version (etcd's key, for etcdutl and etcd) and Cairn's format version.
func writeVersions(meta *bolt.Bucket) error {
	if string(meta.Get(metaEtcdStorageVersion)) == StorageVersion && readUint64(meta, metaFormatVersion) == FormatVersion {
		return nil
	}
	if err := meta.Put(metaEtcdStorageVersion, []byte(StorageVersion)); err != nil {
		return fmt.Errorf("write storage version: %w", err)
	}
	if err := meta.Put(metaFormatVersion, uint64Bytes(FormatVersion)); err != nil {
		return fmt.Errorf("write format version: %w", err)
	}
	return nil
}

func readUint64(b *bolt.Bucket, key []byte) uint64 {
	v := b.Get(key)
	if len(v) != 8 {
		return 0
	}
	return uint64(v[0])<<56 | uint64(v[1])<<48 | uint64(v[2])<<40 | uint64(v[3])<<32 |
		uint64(v[4])<<24 | uint64(v[5])<<16 | uint64(v[6])<<8 | uint64(v[7])
}

// Commit writes every applied entry to bbolt and fsyncs it. It is called on its own every BatchInterval and
// every BatchLimit entries; call it directly to make the applied state durable now.
func (s *Store) Commit() error {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	return s.commitLocked()
}

// commitLocked commits the write transaction. The caller holds batchMu, so no apply runs meanwhile; readers keep
// reading through the fsync, from their own read transactions plus the pending buffer, which is only dropped once
// the commit has landed.
func (s *Store) commitLocked() error {
	if err := s.usable(); err != nil {
		return err
	}
	if !s.dirty {
		return nil
	}
	s.mu.RLock()
	applied, term, rev := s.appliedIndex, s.appliedTerm, s.currentRev
	s.mu.RUnlock()
	meta := s.wtx.Bucket(bucketMeta)
	for _, kv := range []struct {
		k []byte
		v uint64
	}{{metaConsistentIndex, applied}, {metaTerm, term}, {metaCurrentRev, uint64(rev)}} {
		if err := meta.Put(kv.k, uint64Bytes(kv.v)); err != nil {
			return s.fail(fmt.Errorf("write meta %s at index %d: %w", kv.k, applied, err))
		}
	}
	start := time.Now()
	if err := s.wtx.Commit(); err != nil {
		s.wtx = nil
		return s.fail(fmt.Errorf("bbolt commit of %d entries up to index %d in %s: %w",
			s.pendingEntries, applied, s.cfg.Path, err))
	}
	took := time.Since(start)
	wtx, err := s.db.Begin(true)
	s.mu.Lock()
	s.durableIndex = applied
	s.committedRev = rev
	s.pending = reusePending(s.pending)
	s.mu.Unlock()
	if err != nil {
		s.wtx = nil
		return s.fail(fmt.Errorf("begin bbolt write tx on %s: %w", s.cfg.Path, err))
	}
	s.wtx = wtx
	s.committedSize.Store(wtx.Size())
	s.dirty = false
	select {
	case <-s.dirtied: // a wake for changes this commit has just made durable
	default:
	}
	entries := s.pendingEntries
	s.pendingEntries = 0
	s.lastCommit = time.Now()
	if took > time.Second {
		s.log.Warn("slow bbolt commit", "took", took, "durable_index", applied)
	}
	if s.cfg.OnCommit != nil {
		s.cfg.OnCommit(applied, entries, start, start.Add(took))
	}
	return nil
}

// fail puts the store in its failed state: nothing more is applied or read until it is reopened.
func (s *Store) fail(err error) error {
	s.mu.Lock()
	first := s.failed == nil
	if first {
		s.failed = err
	}
	s.mu.Unlock()
	if first {
		s.log.Error("mvcc store failed; reopen it to resume", "err", err, "path", s.cfg.Path)
		if s.cfg.OnFailure != nil {
			s.cfg.OnFailure(err)
		}
	}
	return err
}

// usable reports why the store cannot be used, if it cannot.
func (s *Store) usable() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.usableLocked()
}

func (s *Store) usableLocked() error {
	if s.closed {
		return ErrClosed
	}
	return s.failed
}

// Err reports the failure that stopped the store, or nil.
func (s *Store) Err() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.failed
}

func (s *Store) runCommitter() {
	defer close(s.committerDone)
	for {
		select {
		case <-s.stopCommitter:
			return
		case <-s.dirtied:
		}
		// Changes wait at most BatchInterval for a commit, counted from the first one since the last commit;
		// nothing wakes the committer while the store is idle.
		wait := time.NewTimer(s.cfg.BatchInterval)
		select {
		case <-s.stopCommitter:
			wait.Stop()
			return
		case <-wait.C:
		}
		s.batchMu.Lock()
		if s.dirty && s.usable() == nil {
			_ = s.commitLocked()
		}
		s.batchMu.Unlock()
	}
}

// markDirtyLocked records that wtx holds changes not yet committed and wakes the committer. The caller holds
// batchMu.
func (s *Store) markDirtyLocked() {
	s.dirty = true
	select {
	case s.dirtied <- struct{}{}:
	default: // already woken
	}
}

// Close commits what was applied (unless the store has failed) and closes the bbolt file. Entries applied but not
// committed because of a failure are lost from bbolt; the caller replays them from the log.
func (s *Store) Close() error { return s.close(true) }

// Abandon closes the bbolt file without committing, as a crash between two commits would: what was applied
// since the last commit is lost from disk. For crash tests.
func (s *Store) Abandon() error { return s.close(false) }

func (s *Store) close(commit bool) error {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return nil
	}
	s.compactor.stop()
	close(s.stopCommitter)
	<-s.committerDone
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	var commitErr error
	if commit && s.usable() == nil {
		commitErr = s.commitLocked()
	}
	if s.wtx != nil {
		_ = s.wtx.Rollback()
		s.wtx = nil
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close bbolt %s: %w", s.cfg.Path, err)
	}
	return commitErr
}

// Position is where the store stands in the log and in revisions.
type Position struct {
	AppliedIndex uint64 // last log index applied (visible to reads)
	AppliedTerm  uint64
	DurableIndex uint64 // last log index committed to bbolt
	Revision     int64
	CompactRev   int64
}

// Position reports the store's applied and durable indexes and its revisions.
func (s *Store) Position() Position {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Position{AppliedIndex: s.appliedIndex, AppliedTerm: s.appliedTerm, DurableIndex: s.durableIndex,
		Revision: s.currentRev, CompactRev: s.compactRev}
}

// KeyCount is the number of keys that exist at the current revision (etcd's etcd_debugging_mvcc_keys_total).
func (s *Store) KeyCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.index.live
}

// CommittedSize is the bbolt file's size as of the last commit, read without a lock: what the quota check before
// every write compares (as etcd's backend.Size does), where Size would open a read transaction.
func (s *Store) CommittedSize() int64 { return s.committedSize.Load() }

// Size reports the bbolt file size and how much of it holds live pages.
func (s *Store) Size() (size, inUse int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, 0
	}
	tx, err := s.db.Begin(false)
	if err != nil {
		return 0, 0
	}
	size = tx.Size()
	_ = tx.Rollback()
	free := int64(s.db.Stats().FreePageN) * int64(s.db.Info().PageSize)
	return size, size - free
}
