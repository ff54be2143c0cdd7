package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/pkg/bench"
	"github.com/cairn-kv/cairn/pkg/etcdref"
)

// compareOptions are the flags of `cairn bench compare`.
type compareOptions struct {
	cairnEndpoints []string
	etcdEndpoints  []string
	etcdMembers    int
	repeat         int
	standard       bench.StandardOptions
}

func newBenchCompareCommand(opts *benchOptions) *cobra.Command {
	var cmp compareOptions
	cmd := &cobra.Command{
		Use:   "compare",
		Short: "Run etcd's documented benchmark rows against reference etcd and Cairn, side by side",
		Long: "Starts a reference etcd " + etcdref.Version + " cluster on loopback (built once from the Go module proxy; " +
			"or use --etcd-endpoints), runs put with 1 client, put with 1000 clients on 100 connections, and " +
			"linearizable and serializable range against it and against --cairn-endpoints if given, and prints one " +
			"table. The rows fix --clients, --conns and --total themselves; --output json prints every summary.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCompare(cmd, opts, &cmp) },
	}
	flags := cmd.Flags()
	flags.StringSliceVar(&cmp.cairnEndpoints, "cairn-endpoints", nil, "Cairn client endpoints to measure next to etcd (e.g. a `cairn up` stack)")
	flags.StringSliceVar(&cmp.etcdEndpoints, "etcd-endpoints", nil, "use this running etcd instead of starting a reference cluster")
	flags.IntVar(&cmp.etcdMembers, "etcd-members", 3, "members of the reference etcd cluster to start")
	flags.IntVar(&cmp.repeat, "repeat", 1, "run the whole comparison this many times (machines are noisy)")
	flags.Int64Var(&cmp.standard.SingleClientTotal, "single-client-total", 10000, "requests of the 1-client put row")
	flags.Int64Var(&cmp.standard.ManyClientsTotal, "many-clients-total", 100000, "requests of each 1000-client row")
	flags.IntVar(&cmp.standard.KeySize, "key-size", 8, "key size of the puts")
	flags.IntVar(&cmp.standard.ValSize, "val-size", 256, "value size of the puts and of the ranged key")
	flags.IntVar(&cmp.standard.KeySpaceSize, "key-space-size", 1, "key space of the (sequential) puts; 1 as in etcd's documented commands")
	return cmd
}

func runCompare(cmd *cobra.Command, opts *benchOptions, cmp *compareOptions) error {
	if opts.output != "text" && opts.output != "json" {
		return fmt.Errorf("--output must be text or json, got %q", opts.output)
	}
	ctx := cmd.Context()
	etcdEndpoints := cmp.etcdEndpoints
	if len(etcdEndpoints) == 0 {
		cluster, err := startReferenceEtcd(ctx, cmd, cmp.etcdMembers, "")
		if err != nil {
			return err
		}
		defer cluster.Stop(context.Background())
		etcdEndpoints = cluster.Endpoints()
	}
	targets := []bench.Target{{Name: "etcd " + etcdref.Version, Endpoints: etcdEndpoints}}
	if len(cmp.cairnEndpoints) > 0 {
		targets = append(targets, bench.Target{Name: "cairn", Endpoints: cmp.cairnEndpoints})
	}
	scenarios, err := bench.StandardScenarios(cmp.standard)
	if err != nil {
		return err
	}
	for round := 1; round <= max(cmp.repeat, 1); round++ {
		results, runErr := bench.Compare(ctx, bench.CompareConfig{
			Targets: targets, Scenarios: scenarios, DialTimeout: opts.dialTimeout,
			RequestTimeout: opts.requestTimeout, Progress: cmd.ErrOrStderr(),
		})
		if opts.output == "json" {
			if err := json.NewEncoder(cmd.OutOrStdout()).Encode(results); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "\nround %d of %d, %s\n", round, max(cmp.repeat, 1), describeTargets(targets))
			if err := bench.WriteComparison(cmd.OutOrStdout(), results); err != nil {
				return err
			}
		}
		if runErr != nil {
			return runErr
		}
	}
	return nil
}

func describeTargets(targets []bench.Target) string {
	parts := make([]string, len(targets))
	for i, target := range targets {
		parts[i] = target.Name + " at " + strings.Join(target.Endpoints, ",")
	}
	return strings.Join(parts, "; ")
}

// startReferenceEtcd builds (once per machine) and starts a reference etcd cluster, logging to stderr.
func startReferenceEtcd(ctx context.Context, cmd *cobra.Command, members int, dir string) (*etcdref.Cluster, error) {
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	cluster, err := etcdref.New(etcdref.Config{Members: members, Dir: dir, Logger: logger,
		StackFile: stackFileIn(dir)})
	if err != nil {
		return nil, err
	}
	startCtx, cancel := context.WithTimeout(ctx, 20*time.Minute) // includes a first build
	defer cancel()
	if err := cluster.Start(startCtx); err != nil {
		return nil, err
	}
	return cluster, nil
}

func stackFileIn(dir string) string {
	if dir == "" {
		return ""
	}
	return dir + "/stack.json"
}

func newBenchEtcdClusterCommand() *cobra.Command {
	var members int
	var dataDir string
	cmd := &cobra.Command{
		Use:    "etcd-cluster",
		Short:  "Run a reference etcd cluster on loopback until interrupted, printing its endpoints",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cluster, err := startReferenceEtcd(cmd.Context(), cmd, members, dataDir)
			if err != nil {
				return err
			}
			defer cluster.Stop(context.Background())
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "endpoints: %s\n", strings.Join(cluster.Endpoints(), ","))
			cluster.Supervisor().Stack().WriteText(out)
			<-cmd.Context().Done()
			fmt.Fprintln(out, "stopping")
			return nil
		},
	}
	cmd.Flags().IntVar(&members, "members", 3, "number of etcd members")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "new or empty directory for member data, logs and stack.json (default: a temp dir removed on exit)")
	return cmd
}
