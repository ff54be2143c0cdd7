package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/datadir"
	"github.com/cairn-kv/cairn/internal/tools/progress"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/storage/restore"
)

// newSnapshotCommand is `cairn snapshot restore|status`, etcdutl's snapshot commands for Cairn's and etcd's files.
func newSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot <subcommand>",
		Short: "Restores a snapshot (Cairn's or etcd v3.5-v3.7's) into a member data dir, or describes one, as etcdutl does",
	}
	cmd.AddCommand(newSnapshotRestoreCommand(), newSnapshotStatusCommand(), newSnapshotDecryptCommand())
	return cmd
}

func newSnapshotRestoreCommand() *cobra.Command {
	var cfg restore.Config
	var peerURLs, walDir string
	var mmapSize uint64
	cmd := &cobra.Command{
		Use:   "restore <filename> --data-dir {output dir} [options]",
		Short: "Restores a member snapshot (from `etcdctl snapshot save` against Cairn or etcd) to a new member data dir",
		Long: "Run once per member of the new cluster, with the same --initial-cluster and --initial-cluster-token, as " +
			"with etcdutl. The data dir then starts with `cairn dev --data-dir DIR`, `cairn consensus --data-dir " +
			"DIR/consensus` + `cairn storage --data-dir DIR/storage`, or as DATA-DIR/member-i of `cairn up`.",
		Example: "  cairn snapshot restore backup.db --name m1 --data-dir m1.cairn \\\n" +
			"    --initial-cluster m1=http://10.0.0.1:2380,m2=http://10.0.0.2:2380,m3=http://10.0.0.3:2380 \\\n" +
			"    --initial-cluster-token new-token --initial-advertise-peer-urls http://10.0.0.1:2380",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if walDir != "" {
				return fmt.Errorf("--wal-dir is not supported: a restored member keeps its WAL in DATA-DIR/consensus/wal")
			}
			cfg.SnapshotPath = args[0]
			cfg.PeerURLs = strings.Split(peerURLs, ",")
			cfg.Logger = slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			var latest atomic.Pointer[restore.Progress]
			latest.Store(&restore.Progress{})
			cfg.Progress = func(p restore.Progress) { latest.Store(&p) }
			meter := progress.Start(cmd.ErrOrStderr(), func() string { return restoreStatus(*latest.Load()) })
			_, err := restore.Restore(cmd.Context(), cfg)
			meter.Stop()
			return err
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&cfg.DataDir, "data-dir", "", "Path to the output data directory (default: NAME.cairn)")
	flags.StringVar(&cfg.InitialCluster, "initial-cluster", "default=http://127.0.0.1:2380", "Initial cluster configuration for restore bootstrap")
	flags.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", "etcd-cluster", "Initial cluster token for the cluster during restore bootstrap")
	flags.StringVar(&peerURLs, "initial-advertise-peer-urls", "http://127.0.0.1:2380", "List of this member's peer URLs to advertise to the rest of the cluster")
	flags.StringVar(&cfg.Name, "name", "default", "Human-readable name for this member")
	flags.BoolVar(&cfg.SkipHashCheck, "skip-hash-check", false, "Ignore snapshot integrity hash value (required if copied from data directory)")
	flags.StringVar(&walDir, "wal-dir", "", "Not supported (etcdutl's): the WAL is DATA-DIR/consensus/wal")
	flags.Uint64Var(&mmapSize, "initial-memory-map-size", 0, "Accepted for etcdutl's command lines; the storage sets its own at start")
	flags.Uint64Var(&cfg.BumpRevision, "bump-revision", 0, "How much to increase the latest revision after restore")
	flags.BoolVar(&cfg.MarkCompacted, "mark-compacted", false, "Mark the latest revision after restore as the point of scheduled compaction (required if --bump-revision > 0, disallowed otherwise)")
	return cmd
}

// restoreStatus is a restore's progress line.
func restoreStatus(p restore.Progress) string {
	status := fmt.Sprintf("restoring: %s of %s", humanBytes(p.Bytes), humanBytes(p.TotalBytes))
	if p.Done {
		status += fmt.Sprintf(", %d key revisions", p.KeyRevisions)
	}
	return status
}

func newSnapshotStatusCommand() *cobra.Command {
	var writeOut string
	cmd := &cobra.Command{
		Use:   "status <filename>",
		Short: "Gets backend snapshot status of a given file (hash, revision, total keys, total size, version)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := restore.ReadStatus(args[0])
			if err != nil {
				return err
			}
			return printSnapshotStatus(cmd.OutOrStdout(), writeOut, st)
		},
	}
	cmd.Flags().StringVarP(&writeOut, "write-out", "w", "simple", "set the output format (fields, json, simple, table)")
	return cmd
}

// printSnapshotStatus prints st as etcdutl prints it.
func printSnapshotStatus(out io.Writer, format string, st restore.Status) error {
	row := []string{fmt.Sprintf("%x", st.Hash), fmt.Sprint(st.Revision), fmt.Sprint(st.TotalKey),
		humanBytes(st.TotalSize), st.Version}
	switch format {
	case "simple":
		fmt.Fprintln(out, strings.Join(row, ", "))
	case "fields":
		fmt.Fprintf(out, "\"Hash\" : %d\n\"Revision\" : %d\n\"Keys\" : %d\n\"Size\" : %d\n\"Version\" : %s\n",
			st.Hash, st.Revision, st.TotalKey, st.TotalSize, st.Version)
	case "json":
		return json.NewEncoder(out).Encode(st)
	case "table":
		hdr := []string{"HASH", "REVISION", "TOTAL KEYS", "TOTAL SIZE", "VERSION"}
		widths := make([]int, len(hdr))
		for i := range hdr {
			widths[i] = max(len(hdr[i]), len(row[i])) + 2
		}
		line := func() {
			for _, w := range widths {
				fmt.Fprint(out, "+", strings.Repeat("-", w))
			}
			fmt.Fprintln(out, "+")
		}
		cells := func(cs []string) {
			for i, c := range cs {
				fmt.Fprintf(out, "| %*s ", widths[i]-2, c)
			}
			fmt.Fprintln(out, "|")
		}
		line()
		cells(hdr)
		line()
		cells(row)
		line()
	default:
		return fmt.Errorf("unknown --write-out %q (fields, json, simple, table)", format)
	}
	return nil
}

// humanBytes formats n as go-humanize's Bytes does (SI units), which etcdutl prints.
func humanBytes(n int64) string {
	if n < 10 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"B", "kB", "MB", "GB", "TB", "PB", "EB"}
	e := math.Floor(math.Log(float64(n)) / math.Log(1000))
	val := math.Floor(float64(n)/math.Pow(1000, e)*10+0.5) / 10
	if val < 10 {
		return fmt.Sprintf("%.1f %s", val, units[int(e)])
	}
	return fmt.Sprintf("%.0f %s", val, units[int(e)])
}

// restoreDevDataDir is `cairn dev --from-snapshot`: it restores the snapshot into a new data dir as the one member
// `cairn dev` runs. A data dir restored from the same file by an earlier run is started as it is; any other
// data dir that holds something is refused.
func restoreDevDataDir(ctx context.Context, do devOptions, logger *slog.Logger) error {
	if do.fromSnapshot == "" {
		return nil
	}
	snapshot, err := filepath.Abs(do.fromSnapshot)
	if err != nil {
		return fmt.Errorf("--from-snapshot: %w", err)
	}
	if m, err := restore.ReadManifest(do.dataDir); err == nil && m.Snapshot == snapshot {
		logger.Info("data dir already restored from the snapshot; starting it", "data-dir", do.dataDir, "snapshot", snapshot)
		return nil
	}
	_, err = restore.Restore(ctx, restore.Config{
		SnapshotPath: snapshot, DataDir: do.dataDir, Name: do.name, InitialCluster: initialCluster(do.name, do.peerURLs),
		InitialClusterToken: consensus.DefaultConfig().InitialClusterToken, PeerURLs: do.peerURLs, Logger: logger,
	})
	if err != nil {
		return fmt.Errorf("--from-snapshot: %w", err)
	}
	return nil
}

// lockDataDir refuses a data dir that holds something other than what command uses (one of kinds; none: any),
// or that a running process holds, and locks it for this process until Release.
func lockDataDir(dir, command string, kinds ...datadir.Kind) (*datadir.Lock, error) {
	if len(kinds) > 0 {
		if err := datadir.Expect(dir, command, kinds...); err != nil {
			return nil, err
		}
	}
	return datadir.Acquire(dir, command)
}
