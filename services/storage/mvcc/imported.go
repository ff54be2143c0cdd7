package mvcc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
)

// StorageVersion is the etcd storage schema version Cairn's bbolt file is compatible with. It is written to the
// meta bucket under etcd's key, so `etcdutl snapshot status` shows it and etcd v3.6+ accepts the file.
const StorageVersion = "3.6.0"

// FormatVersion is the version of Cairn's own layout of the bbolt file (meta keys, lease records). A file
// written by a later, unknown format is refused by ImportSnapshot.
const FormatVersion = 1

// More meta keys: Cairn's format version, and etcd's names for the compact revisions, storage version and
// membership state, which an etcd snapshot carries.
var (
	metaFormatVersion        = []byte("cairn_format_version")
	metaEtcdStorageVersion   = []byte("storageVersion")
	metaEtcdScheduledCompact = []byte("scheduledCompactRev")
	metaEtcdFinishedCompact  = []byte("finishedCompactRev")
	metaEtcdConfState        = []byte("confState")
)

// etcdOnlyBuckets are the buckets of etcd's layout that hold cluster membership and cluster version: a restore
// into a new Cairn cluster drops them (the new cluster's membership is the restore's). The auth buckets are
// both layouts' (Cairn keeps users, roles and the auth flag and revision as etcd does) and carry over, as
// etcdutl carries them.
var etcdOnlyBuckets = []string{"cluster", "members", "members_removed"}

// ErrUnknownLayout means a bbolt file is neither Cairn's layout nor etcd's (v3.5 to v3.7), or is a later version
// of either than this binary knows.
var ErrUnknownLayout = errors.New("mvcc: not a Cairn or etcd v3.5-v3.7 database")

// ImportOptions say how ImportSnapshot rewrites a snapshot for a new cluster.
type ImportOptions struct {
	// ConsistentIndex and Term are where the new cluster's log starts.
	ConsistentIndex uint64
	Term            uint64
	// BumpRevision raises the latest revision by this much, and MarkCompacted schedules a compaction at the
	// result, as etcdutl's --bump-revision and --mark-compacted do.
	BumpRevision  int64
	MarkCompacted bool
}

// Imported describes the database ImportSnapshot prepared.
type Imported struct {
	// Layout is "cairn" or "etcd", what wrote the snapshot.
	Layout string
	// SourceStorageVersion is the snapshot's etcd storage version ("" for etcd v3.5 and older Cairn files).
	SourceStorageVersion string
	Revision             int64
	CompactRevision      int64
	// KeyRevisions is the number of entries in the key bucket (every retained revision of every key).
	KeyRevisions int64
	Leases       int
}

// ImportSnapshot rewrites the bbolt file at path, a copy of a Cairn or etcd snapshot, into a Cairn member's
// database for a new cluster: the key and lease buckets stay as they are (both layouts share etcd's), so every
// key keeps its create and mod revisions, version and lease; the compact revision carries over; the consistent
// index and term become opts'; users, roles and the auth flag and revision carry over; etcd's membership and
// cluster buckets, alarms (of the old members) and the leasekeeper claim are dropped. It commits with one fsync.
func ImportSnapshot(path string, opts ImportOptions) (out Imported, err error) {
	defer func() {
		if r := recover(); r != nil { // bbolt panics on some corrupt pages
			err = fmt.Errorf("%w: %s is corrupt: %v", ErrUnknownLayout, path, r)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return Imported{}, fmt.Errorf("%w: %s: %w", ErrUnknownLayout, path, err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		var err error
		out, err = importTx(tx, opts)
		return err
	})
	if err != nil {
		return Imported{}, fmt.Errorf("import %s: %w", path, err)
	}
	return out, nil
}

func importTx(tx *bolt.Tx, opts ImportOptions) (Imported, error) {
	var out Imported
	if err := checkBuckets(tx); err != nil {
		return out, err
	}
	meta, keys := tx.Bucket(bucketMeta), tx.Bucket(bucketKey)
	if meta == nil || keys == nil {
		return out, fmt.Errorf("%w: no %q or %q bucket", ErrUnknownLayout, bucketMeta, bucketKey)
	}
	if err := checkVersions(meta, &out); err != nil {
		return out, err
	}
	latest := int64(readUint64(meta, metaCurrentRev))
	if k, _ := keys.Cursor().Last(); k != nil {
		rev, _, err := parseRevKey(k)
		if err != nil {
			return out, fmt.Errorf("%w: %w", ErrUnknownLayout, err)
		}
		latest = max(latest, rev.main)
	}
	scheduled, finished := int64(readUint64(meta, metaScheduledCompact)), int64(readUint64(meta, metaFinishedCompact))
	if out.Layout == "etcd" {
		scheduled, finished = etcdRevision(meta.Get(metaEtcdScheduledCompact)), etcdRevision(meta.Get(metaEtcdFinishedCompact))
	}
	if opts.BumpRevision > 0 {
		latest += opts.BumpRevision
		// etcd marks the bumped revision with an empty value in the key bucket, so a later etcd restore of
		// this database keeps the revision too; Store.Open skips such markers.
		if err := keys.Put(revKey(revision{main: latest}, false), []byte{}); err != nil {
			return out, fmt.Errorf("write bumped revision %d: %w", latest, err)
		}
	}
	if opts.MarkCompacted {
		scheduled = latest
	}
	for _, name := range etcdOnlyBuckets {
		if tx.Bucket([]byte(name)) != nil {
			if err := tx.DeleteBucket([]byte(name)); err != nil {
				return out, fmt.Errorf("drop bucket %s: %w", name, err)
			}
		}
	}
	if tx.Bucket(bucketAlarm) != nil {
		if err := tx.DeleteBucket(bucketAlarm); err != nil {
			return out, fmt.Errorf("drop alarms: %w", err)
		}
	}
	for _, name := range [][]byte{metaEtcdScheduledCompact, metaEtcdFinishedCompact, metaEtcdConfState, metaKeeperState} {
		if err := meta.Delete(name); err != nil {
			return out, fmt.Errorf("drop meta %s: %w", name, err)
		}
	}
	for _, kv := range []struct {
		k []byte
		v []byte
	}{
		{metaConsistentIndex, uint64Bytes(opts.ConsistentIndex)}, {metaTerm, uint64Bytes(opts.Term)},
		{metaCurrentRev, uint64Bytes(uint64(latest))}, {metaScheduledCompact, uint64Bytes(uint64(scheduled))},
		{metaFinishedCompact, uint64Bytes(uint64(finished))},
		{metaEtcdStorageVersion, []byte(StorageVersion)}, {metaFormatVersion, uint64Bytes(FormatVersion)},
	} {
		if err := meta.Put(kv.k, kv.v); err != nil {
			return out, fmt.Errorf("write meta %s: %w", kv.k, err)
		}
	}
	leases, err := importLeases(tx.Bucket(bucketLease), opts.ConsistentIndex)
	if err != nil {
		return out, err
	}
	out.Leases = leases
	out.KeyRevisions = int64(keys.Stats().KeyN)
	out.Revision, out.CompactRevision = latest, scheduled
	return out, nil
}

// checkBuckets refuses a file holding a bucket neither layout has: a later layout this binary does not know.
func checkBuckets(tx *bolt.Tx) error {
	known := map[string]bool{}
	for _, b := range [][]byte{bucketKey, bucketMeta, bucketLease, bucketAlarm, bucketAuth, bucketAuthUsers, bucketAuthRoles} {
		known[string(b)] = true
	}
	for _, name := range etcdOnlyBuckets {
		known[name] = true
	}
	return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		if !known[string(name)] {
			return fmt.Errorf("%w: unknown bucket %q", ErrUnknownLayout, name)
		}
		return nil
	})
}

// checkVersions tells Cairn's layout from etcd's and refuses versions later than this binary knows.
func checkVersions(meta *bolt.Bucket, out *Imported) error {
	out.Layout = "etcd"
	if meta.Get(metaCurrentRev) != nil || meta.Get(metaFormatVersion) != nil {
		out.Layout = "cairn"
	}
	if format := readUint64(meta, metaFormatVersion); format > FormatVersion {
		return fmt.Errorf("%w: Cairn layout version %d, this binary knows up to %d", ErrUnknownLayout, format, FormatVersion)
	}
	if v := meta.Get(metaEtcdStorageVersion); len(v) > 0 {
		out.SourceStorageVersion = string(v)
		major, minor, ok := parseMajorMinor(string(v))
		if !ok || major != 3 || minor > 7 {
			return fmt.Errorf("%w: storage version %q (known: 3.5 to 3.7)", ErrUnknownLayout, v)
		}
	}
	return nil
}

func parseMajorMinor(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// etcdRevision reads a revision as etcd's meta bucket stores it (main‖'_'‖sub), 0 when absent.
func etcdRevision(b []byte) int64 {
	if len(b) != revBytesLen {
		return 0
	}
	rev, _, err := parseRevKey(b)
	if err != nil {
		return 0
	}
	return rev.main
}

// importLeases renumbers the leases' checkpoints into the new log: a checkpointed remaining TTL counts as taken
// at the log's first index (so the keeper honours it, as etcd honours a persisted remaining TTL), and the old
// log's index is forgotten. etcd's lease records share the fields Cairn reads (ID, TTL, remaining TTL).
func importLeases(b *bolt.Bucket, firstIndex uint64) (int, error) {
	if b == nil {
		return 0, nil
	}
	type record struct{ key, value []byte }
	var records []record
	err := b.ForEach(func(k, v []byte) error {
		var rec storagepb.LeaseRecord
		if err := proto.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("%w: lease record %x: %w", ErrUnknownLayout, k, err)
		}
		rec.CheckpointIndex = 0
		if rec.RemainingTtl > 0 {
			rec.CheckpointIndex = firstIndex
		}
		data, err := proto.Marshal(&rec)
		if err != nil {
			return err
		}
		records = append(records, record{append([]byte(nil), k...), data})
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, r := range records {
		if err := b.Put(r.key, r.value); err != nil {
			return 0, fmt.Errorf("rewrite lease %x: %w", r.key, err)
		}
	}
	return len(records), nil
}
