package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/seal/kmsplugin"
	"github.com/cairn-kv/cairn/internal/tools/progress"
	"github.com/cairn-kv/cairn/internal/tools/sealops"
)

// encryptionFlag is --encryption-config, on every command that seals or opens values.
type encryptionFlag struct{ path string }

func (e *encryptionFlag) register(flags *pflag.FlagSet) {
	flags.StringVar(&e.path, "encryption-config", "", "EncryptionConfiguration file (Kubernetes' shape, key prefixes for resources): values are sealed at rest. Every storage and watchhub of a cluster needs the same file.")
}

// load builds the keyring of the file (nil without one), starting its KMS plugins.
func (e *encryptionFlag) load(ctx context.Context, logger *slog.Logger) (*seal.Keyring, error) {
	keyring, err := seal.LoadKeyring(ctx, e.path, seal.Options{Logger: logger}, kmsplugin.OpenProvider)
	if err != nil {
		return nil, err
	}
	if keyring != nil {
		logger.Info("values are sealed at rest", "encryption-config", e.path)
	}
	return keyring, nil
}

// absolute returns the flag with its path made absolute (for child processes with another working directory).
func (e encryptionFlag) absolute() (string, error) {
	if e.path == "" {
		return "", nil
	}
	return filepath.Abs(e.path)
}

func newEncryptionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "encryption",
		Short: "Encryption at rest: which keys seal the stored values, and rewrapping them under the primary key",
	}
	cmd.AddCommand(newEncryptionStatusCommand(), newEncryptionRewrapCommand())
	return cmd
}

// sealClientFlags are the flags of the encryption commands that talk to a cluster.
type sealClientFlags struct {
	endpoints []string
	db        string
	enc       encryptionFlag
	timeout   time.Duration
}

func (f *sealClientFlags) register(flags *pflag.FlagSet) {
	flags.StringSliceVar(&f.endpoints, "endpoints", []string{"127.0.0.1:2379"}, "etcd client endpoints of the cluster.")
	flags.DurationVar(&f.timeout, "command-timeout", 10*time.Minute, "Longest the command may take.")
	f.enc.register(flags)
}

func (f *sealClientFlags) client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: f.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func newEncryptionStatusCommand() *cobra.Command {
	var f sealClientFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Count the stored values (every revision kept) under each provider and key",
		Long: "Reads a snapshot of the cluster (--endpoints), or a snapshot file or a stopped member's storage.db " +
			"(--db), and counts the values under each provider and key. With --encryption-config it also says which " +
			"key is primary and which keys the file no longer has (a storage refuses to start while values use one).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			var scan *sealops.Scan
			var err error
			if f.db != "" {
				scan, err = sealops.ScanFile(f.db)
			} else {
				cli, cerr := f.client()
				if cerr != nil {
					return cerr
				}
				defer cli.Close()
				scan, err = sealops.ScanCluster(ctx, cli, "")
			}
			if err != nil {
				return err
			}
			keyring, err := f.enc.load(ctx, slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			defer keyring.Close()
			return printStatus(cmd, scan, keyring)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&f.db, "db", "", "A snapshot file or a stopped member's storage.db, instead of --endpoints.")
	return cmd
}

func printStatus(cmd *cobra.Command, scan *sealops.Scan, keyring *seal.Keyring) error {
	latest := seal.Census{}
	for _, ref := range scan.Latest {
		latest[ref]++
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROVIDER\tKEY\tVALUES\tLATEST PER KEY\tSTATE")
	for _, ref := range scan.All.Refs() {
		state := ""
		if keyring != nil {
			switch {
			case ref.Provider == seal.KindIdentity && !keyring.Uses(ref.Provider, ref.KeyID) && !coversAny(keyring, scan.PlainKeys):
				state = "plain: keys in no resource"
			case !keyring.Uses(ref.Provider, ref.KeyID):
				state = "MISSING from the configuration"
			default:
				state = "configured"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\n", ref.Provider, ref.KeyID, scan.All[ref], latest[ref], state)
	}
	return w.Flush()
}

// coversAny reports whether a key of keys belongs to a resource of keyring (its plain values need identity).
func coversAny(keyring *seal.Keyring, keys map[string]bool) bool {
	for key := range keys {
		if keyring.Covers([]byte(key)) {
			return true
		}
	}
	return false
}

func newEncryptionRewrapCommand() *cobra.Command {
	var f sealClientFlags
	var opts sealops.RewrapOptions
	cmd := &cobra.Command{
		Use:   "rewrap",
		Short: "Write again, under the primary key, every key whose value is sealed by another (resumable: run it again)",
		Long: "Finds (from a snapshot of the cluster) every key whose latest value is not sealed by the key that " +
			"seals it now according to --encryption-config (the cluster's file, with the new key first), and writes " +
			"its current value again through the log, in batches guarded by mod_revision, printing progress. " +
			"Running it again carries on where a stopped run left off. Old revisions keep their ciphertext until " +
			"compaction.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.enc.path == "" {
				return fmt.Errorf("rewrap needs --encryption-config (the cluster's file)")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			keyring, err := f.enc.load(ctx, slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			defer keyring.Close()
			cli, err := f.client()
			if err != nil {
				return err
			}
			defer cli.Close()
			var latest atomic.Pointer[sealops.RewrapResult]
			latest.Store(&sealops.RewrapResult{})
			opts.Progress = func(res sealops.RewrapResult) { latest.Store(&res) }
			meter := progress.Start(cmd.ErrOrStderr(), func() string {
				res := latest.Load()
				return fmt.Sprintf("rewrapped %d of %d keys (%d skipped: deleted or rewritten by a client)", res.Rewritten, res.Candidates, res.Skipped)
			})
			res, err := sealops.Rewrap(ctx, cli, keyring, opts)
			meter.Stop()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rewrap done: %d keys to rewrap, %d rewritten, %d skipped\n",
				res.Candidates, res.Rewritten, res.Skipped)
			return nil
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().IntVar(&opts.BatchKeys, "batch-keys", 100, "Keys per Txn (at most 128, etcd's --max-txn-ops).")
	cmd.Flags().IntVar(&opts.BatchBytes, "batch-bytes", 1<<20, "About how many bytes of values per Txn.")
	return cmd
}

// newSnapshotDecryptCommand is `cairn snapshot decrypt IN OUT`.
func newSnapshotDecryptCommand() *cobra.Command {
	var enc encryptionFlag
	cmd := &cobra.Command{
		Use:   "decrypt IN OUT",
		Short: "Write a plain, etcd-compatible copy of a sealed snapshot file",
		Long: "Opens every value of the snapshot file IN (from `etcdctl snapshot save` or `cairn backup`) with the " +
			"keys of --encryption-config and writes the plain copy to OUT, with etcd's integrity hash.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			keyring, err := enc.load(cmd.Context(), slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			if keyring == nil {
				return fmt.Errorf("decrypt needs --encryption-config")
			}
			defer keyring.Close()
			n, err := sealops.DecryptSnapshot(args[0], args[1], keyring)
			if err != nil {
				_ = os.Remove(args[1])
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d values written plain to %s\n", args[0], n, args[1])
			return nil
		},
	}
	enc.register(cmd.Flags())
	return cmd
}
