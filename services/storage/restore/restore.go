package restore

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cairn-kv/cairn/internal/datadir"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/storage"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// ManifestFile is written at the top of a restored data dir: what it was restored from, and as which member.
const ManifestFile = "restore.json"

// Config is one `cairn snapshot restore`, with etcdutl v3.7's flags.
type Config struct {
	// SnapshotPath is the snapshot file (the command's argument).
	SnapshotPath string
	// DataDir is the member data dir to create; it must not exist or be empty. Default: Name + ".cairn".
	DataDir string
	// Name, InitialCluster, InitialClusterToken and PeerURLs are the new member and cluster, as etcdutl's
	// --name, --initial-cluster, --initial-cluster-token and --initial-advertise-peer-urls.
	Name                string
	InitialCluster      string
	InitialClusterToken string
	PeerURLs            []string
	// SkipHashCheck accepts a file without (or with a wrong) SHA-256 trailer, such as a database copied from a
	// data dir.
	SkipHashCheck bool
	// BumpRevision raises the latest revision; MarkCompacted then compacts at it. Each needs the other.
	BumpRevision  uint64
	MarkCompacted bool
	// Progress, when set, is called as the copy advances and once at the end (Done true).
	Progress func(Progress)
	// Logger receives the restore's log lines (default slog.Default()).
	Logger *slog.Logger
}

// Progress is how far a restore has come.
type Progress struct {
	// Bytes of TotalBytes of the database have been copied and hashed.
	Bytes, TotalBytes int64
	// KeyRevisions is the number of entries in the key bucket, known once the copy is done.
	KeyRevisions int64
	// Done is set on the last report, once the data dir is complete.
	Done bool
}

// Manifest is the content of ManifestFile: the snapshot restored, what wrote it ("cairn" or "etcd"), the member
// it was restored as (etcd's flags, and the IDs derived from them, in hex) and what the database holds.
type Manifest struct {
	Snapshot            string    `json:"snapshot"`
	RestoredAt          time.Time `json:"restored_at"`
	Layout              string    `json:"source_layout"`
	Name                string    `json:"name"`
	InitialCluster      string    `json:"initial_cluster"`
	InitialClusterToken string    `json:"initial_cluster_token"`
	PeerURLs            []string  `json:"peer_urls"`
	MemberID            string    `json:"member_id"`
	ClusterID           string    `json:"cluster_id"`
	Revision            int64     `json:"revision"`
	CompactRevision     int64     `json:"compact_revision"`
	KeyRevisions        int64     `json:"key_revisions"`
	Leases              int       `json:"leases"`
}

// Errors a restore is refused with (wrapped with the details).
var (
	ErrBadFlags     = errors.New("restore: bad flags")
	ErrDataDirInUse = errors.New("restore: data dir not empty")
	ErrHash         = errors.New("restore: snapshot integrity check failed")
	ErrNotSnapshot  = errors.New("restore: not a snapshot")
)

// Validate fills defaults and checks c as etcdutl does.
func (c *Config) Validate() error {
	if c.SnapshotPath == "" {
		return fmt.Errorf("%w: snapshot restore requires exactly one argument, the snapshot file", ErrBadFlags)
	}
	if (c.BumpRevision == 0) == c.MarkCompacted {
		if c.MarkCompacted || c.BumpRevision > 0 {
			return fmt.Errorf("%w: --mark-compacted required if --bump-revision > 0, disallowed otherwise", ErrBadFlags)
		}
	}
	if c.Name == "" {
		c.Name = "default"
	}
	if c.DataDir == "" {
		c.DataDir = c.Name + ".cairn"
	}
	if c.InitialClusterToken == "" {
		c.InitialClusterToken = "etcd-cluster"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := consensus.CheckRestoredMember(c.member()); err != nil {
		return fmt.Errorf("%w: %w", ErrBadFlags, err)
	}
	return nil
}

func (c *Config) member() consensus.RestoredMember {
	return consensus.RestoredMember{Name: c.Name, InitialCluster: c.InitialCluster,
		InitialClusterToken: c.InitialClusterToken, PeerURLs: c.PeerURLs}
}

// Restore makes cfg.DataDir a member data dir holding the snapshot (see the package doc).
func Restore(ctx context.Context, cfg Config) (Manifest, error) {
	if err := cfg.Validate(); err != nil {
		return Manifest{}, err
	}
	if err := checkEmpty(cfg.DataDir); err != nil {
		return Manifest{}, err
	}
	tmp := tempDir(cfg.DataDir)
	if err := os.RemoveAll(tmp); err != nil {
		return Manifest{}, fmt.Errorf("restore: remove leftover %s: %w", tmp, err)
	}
	m, err := restoreInto(ctx, cfg, tmp)
	if err == nil {
		err = publish(tmp, cfg.DataDir)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return Manifest{}, err
	}
	cfg.Logger.Info("restored snapshot", "path", cfg.SnapshotPath, "data-dir", cfg.DataDir, "name", cfg.Name,
		"member-id", m.MemberID, "cluster-id", m.ClusterID, "revision", m.Revision,
		"compact-revision", m.CompactRevision, "key-revisions", m.KeyRevisions, "leases", m.Leases)
	return m, nil
}

// tempDir is where a restore into dataDir is built: beside it, so the final rename stays on one file system.
func tempDir(dataDir string) string {
	clean := filepath.Clean(dataDir)
	return filepath.Join(filepath.Dir(clean), "."+filepath.Base(clean)+".restoring")
}

func checkEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: data-dir %q could not be read: %w", ErrDataDirInUse, dir, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%w: data-dir %q not empty; restore into a new directory", ErrDataDirInUse, dir)
	}
	return nil
}

func restoreInto(ctx context.Context, cfg Config, tmp string) (Manifest, error) {
	storageDir, consensusDir := filepath.Join(tmp, "storage"), filepath.Join(tmp, "consensus")
	for _, dir := range []string{storageDir, consensusDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return Manifest{}, fmt.Errorf("restore: create %s: %w", dir, err)
		}
	}
	dbPath := filepath.Join(storageDir, storage.DBFileName)
	total, err := copyVerified(ctx, cfg, dbPath)
	if err != nil {
		return Manifest{}, err
	}
	log, err := consensus.WriteRestoredWAL(consensusDir, cfg.member())
	if err != nil {
		return Manifest{}, err
	}
	imported, err := mvcc.ImportSnapshot(dbPath, mvcc.ImportOptions{ConsistentIndex: log.Index, Term: log.Term,
		BumpRevision: int64(cfg.BumpRevision), MarkCompacted: cfg.MarkCompacted})
	if err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: %w", ErrNotSnapshot, cfg.SnapshotPath, err)
	}
	if cfg.Progress != nil {
		cfg.Progress(Progress{Bytes: total, TotalBytes: total, KeyRevisions: imported.KeyRevisions, Done: true})
	}
	m := Manifest{
		Snapshot: cfg.SnapshotPath, RestoredAt: time.Now().UTC(), Layout: imported.Layout, Name: cfg.Name,
		InitialCluster: cfg.InitialCluster, InitialClusterToken: cfg.InitialClusterToken, PeerURLs: cfg.PeerURLs,
		MemberID: fmt.Sprintf("%x", log.MemberID), ClusterID: fmt.Sprintf("%x", log.ClusterID),
		Revision: imported.Revision, CompactRevision: imported.CompactRevision,
		KeyRevisions: imported.KeyRevisions, Leases: imported.Leases,
	}
	if err := writeManifest(tmp, m); err != nil {
		return Manifest{}, err
	}
	for _, dir := range []string{storageDir, consensusDir, tmp} {
		if err := datadir.SyncDir(dir); err != nil {
			return Manifest{}, err
		}
	}
	return m, nil
}

// copyVerified copies the snapshot's database to dbPath, hashing it on the way, checks the SHA-256 trailer as
// etcdutl does, and fsyncs the copy. It returns the database's size.
func copyVerified(ctx context.Context, cfg Config, dbPath string) (int64, error) {
	src, err := os.Open(cfg.SnapshotPath)
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	size := st.Size()
	hasHash := size%512 == sha256.Size
	if !hasHash && !cfg.SkipHashCheck {
		return 0, fmt.Errorf("%w: %s (%d bytes) has no sha256 trailer (a file copied from a data dir needs --skip-hash-check)",
			ErrHash, cfg.SnapshotPath, size)
	}
	dbSize := size
	if hasHash {
		dbSize -= sha256.Size
	}
	dst, err := os.OpenFile(dbPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	defer dst.Close()
	sum := sha256.New()
	pw := &progressWriter{ctx: ctx, w: io.MultiWriter(dst, sum), total: dbSize, report: cfg.Progress}
	if _, err := io.Copy(pw, io.LimitReader(src, dbSize)); err != nil {
		return 0, fmt.Errorf("restore: copy %s: %w", cfg.SnapshotPath, err)
	}
	if hasHash && !cfg.SkipHashCheck {
		want := make([]byte, sha256.Size)
		if _, err := io.ReadFull(src, want); err != nil {
			return 0, fmt.Errorf("restore: read sha256 trailer of %s: %w", cfg.SnapshotPath, err)
		}
		if got := sum.Sum(nil); string(got) != string(want) {
			return 0, fmt.Errorf("%w: %s: sha256 of the database is %x, the trailer says %x (file truncated or corrupted)",
				ErrHash, cfg.SnapshotPath, got, want)
		}
	}
	if err := dst.Sync(); err != nil {
		return 0, fmt.Errorf("restore: fsync %s: %w", dbPath, err)
	}
	return dbSize, nil
}

// progressWriter reports progress every progressStep bytes and stops the copy when ctx ends.
type progressWriter struct {
	ctx          context.Context
	w            io.Writer
	total, done  int64
	lastReported int64
	report       func(Progress)
}

const progressStep = 64 << 20

func (p *progressWriter) Write(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := p.w.Write(b)
	p.done += int64(n)
	if p.report != nil && p.done-p.lastReported >= progressStep {
		p.lastReported = p.done
		p.report(Progress{Bytes: p.done, TotalBytes: p.total})
	}
	return n, err
}

func writeManifest(dir string, m Manifest) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("restore: encode manifest: %w", err)
	}
	path := filepath.Join(dir, ManifestFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(append(raw, '\n')); err != nil {
		return fmt.Errorf("restore: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("restore: fsync %s: %w", path, err)
	}
	return nil
}

// ReadManifest reads the manifest of a restored data dir; it fails with os.ErrNotExist when dir was not restored.
func ReadManifest(dir string) (Manifest, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return Manifest{}, fmt.Errorf("restore: parse %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return m, nil
}

// publish renames the finished temporary directory to dataDir (an empty dataDir is replaced) and fsyncs the
// parent, so the data dir appears whole or not at all.
func publish(tmp, dataDir string) error {
	if err := os.Rename(tmp, dataDir); err != nil {
		return fmt.Errorf("restore: rename %s to %s: %w", tmp, dataDir, err)
	}
	return datadir.SyncDir(filepath.Dir(filepath.Clean(dataDir)))
}
