package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/tools/bench"
	"github.com/cairn-kv/cairn/internal/tools/etcdref"
	"github.com/cairn-kv/cairn/internal/tools/localstack"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// compareOptions are the flags of `cairn bench compare`.
type compareOptions struct {
	cairnEndpoints []string
	cairnMembers   int
	etcdOnly       bool
	etcdEndpoints  []string
	etcdMembers    int
	repeat         int
	standard       bench.StandardOptions
	workloads      []string
	leaseTotal     int64
	list           bench.ListOptions
}

func newBenchCompareCommand(opts *benchOptions) *cobra.Command {
	var cmp compareOptions
	cmd := &cobra.Command{
		Use:   "compare",
		Short: "Run etcd's documented benchmark rows against reference etcd and Cairn, side by side",
		Long: "Starts a reference etcd " + etcdref.Version + " cluster on loopback (built once from the Go module proxy; " +
			"or use --etcd-endpoints) and a `cairn up` stack of this binary in a temporary directory (or use " +
			"--cairn-endpoints), runs put with 1 client and put with 1000 clients on 100 connections (both --target-leader, " +
			"as etcd's performance guide runs them), and " +
			"linearizable and serializable range (with --workloads lease: lease-keepalive and lease-grant-revoke; with " +
			"--workloads list: a Kubernetes-style LIST of --list-keys keys, linearizable and serializable) " +
			"against each in turn, and prints one table. The rows fix " +
			"--clients, --conns and --total themselves; --output json prints every summary.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCompare(cmd, opts, &cmp) },
	}
	flags := cmd.Flags()
	flags.StringSliceVar(&cmp.cairnEndpoints, "cairn-endpoints", nil, "Cairn client endpoints to measure next to etcd; default: start a cairn up stack")
	flags.IntVar(&cmp.cairnMembers, "cairn-members", 3, "members of the cairn up stack started when --cairn-endpoints is not given")
	flags.BoolVar(&cmp.etcdOnly, "etcd-only", false, "measure the reference etcd alone")
	flags.StringSliceVar(&cmp.etcdEndpoints, "etcd-endpoints", nil, "use this running etcd instead of starting a reference cluster")
	flags.IntVar(&cmp.etcdMembers, "etcd-members", 3, "members of the reference etcd cluster to start")
	flags.IntVar(&cmp.repeat, "repeat", 1, "run the whole comparison this many times (machines are noisy)")
	flags.Int64Var(&cmp.standard.SingleClientTotal, "single-client-total", 10000, "requests of the 1-client put row")
	flags.Int64Var(&cmp.standard.ManyClientsTotal, "many-clients-total", 100000, "requests of each 1000-client row")
	flags.IntVar(&cmp.standard.KeySize, "key-size", 8, "key size of the puts")
	flags.IntVar(&cmp.standard.ValSize, "val-size", 256, "value size of the puts and of the ranged key")
	flags.IntVar(&cmp.standard.KeySpaceSize, "key-space-size", 1, "key space of the (sequential) puts; 1 as in etcd's documented commands")
	flags.StringSliceVar(&cmp.workloads, "workloads", []string{"standard"}, "rows to run: standard (etcd's documented put and range rows), lease (lease-keepalive and lease-grant-revoke), list (LISTs of a prefix), in any combination")
	flags.Int64Var(&cmp.leaseTotal, "lease-total", 100000, "keep-alives of the lease-keepalive row (grant-revoke rows run a tenth and a hundredth)")
	flags.IntVar(&cmp.list.Keys, "list-keys", 5000, "keys under the prefix the list rows read (written first unless already there)")
	flags.IntVar(&cmp.list.ValSize, "list-val-size", 1024, "value size of the listed keys")
	flags.Int64Var(&cmp.list.Total, "list-total", 400, "LISTs of each list row")
	return cmd
}

func runCompare(cmd *cobra.Command, opts *benchOptions, cmp *compareOptions) error {
	if opts.output != "text" && opts.output != "json" {
		return fmt.Errorf("--output must be text or json, got %q", opts.output)
	}
	ctx := cmd.Context()
	tracing, err := startBenchTrace(ctx, opts.trace, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer tracing.stop(ctx)
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
	cairnEndpoints := cmp.cairnEndpoints
	if len(cairnEndpoints) == 0 && !cmp.etcdOnly {
		stack, err := startCairnUp(ctx, cmd, cmp.cairnMembers, tracing.childEnv())
		if err != nil {
			return err
		}
		defer stack.Stop(context.Background())
		cairnEndpoints = stack.ClientEndpoints()
	}
	if len(cairnEndpoints) > 0 {
		targets = append(targets, bench.Target{Name: "cairn", Endpoints: cairnEndpoints})
	}
	scenarios, err := compareScenarios(cmp)
	if err != nil {
		return err
	}
	var rounds [][]bench.ComparisonResult
	for round := 1; round <= max(cmp.repeat, 1); round++ {
		results, runErr := bench.Compare(ctx, bench.CompareConfig{
			Targets: roundOrder(targets, round), Scenarios: scenarios, DialTimeout: opts.dialTimeout,
			RequestTimeout: opts.requestTimeout, Progress: cmd.ErrOrStderr(),
		})
		results = inTargetOrder(results, targets)
		rounds = append(rounds, results)
		if opts.output == "json" {
			if err := json.NewEncoder(cmd.OutOrStdout()).Encode(results); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "\nround %d of %d, %s\n", round, max(cmp.repeat, 1), describeTargets(roundOrder(targets, round)))
			if err := bench.WriteComparison(cmd.OutOrStdout(), results); err != nil {
				return err
			}
		}
		// The round's requests of every row, grouped by operation type (etcd's own spans do not come here).
		if err := tracing.writeReport(ctx, opts.traceOutput(cmd)); err != nil {
			return err
		}
		if runErr != nil {
			return runErr
		}
	}
	if opts.output == "text" && len(rounds) > 1 {
		fmt.Fprintf(cmd.OutOrStdout(), "\nover %d rounds (each ratio is taken within its round):\n", len(rounds))
		return bench.WriteRoundsSummary(cmd.OutOrStdout(), rounds, targets[0].Name)
	}
	return nil
}

// roundOrder is the order the targets run in within each scenario of a round: as given in odd rounds,
// reversed in even ones, so that neither always runs first (after the other's load) over several rounds.
func roundOrder(targets []bench.Target, round int) []bench.Target {
	if round%2 == 1 {
		return targets
	}
	reversed := slices.Clone(targets)
	slices.Reverse(reversed)
	return reversed
}

// inTargetOrder lists each scenario's results in the order of targets (the first is the tables' baseline).
func inTargetOrder(results []bench.ComparisonResult, targets []bench.Target) []bench.ComparisonResult {
	rank := map[string]int{}
	for i, t := range targets {
		rank[t.Name] = i
	}
	var out []bench.ComparisonResult
	for start := 0; start < len(results); {
		end := start + 1
		for end < len(results) && results[end].Scenario == results[start].Scenario {
			end++
		}
		scenario := slices.Clone(results[start:end])
		slices.SortStableFunc(scenario, func(a, b bench.ComparisonResult) int { return rank[a.Target] - rank[b.Target] })
		out = append(out, scenario...)
		start = end
	}
	return out
}

// compareScenarios are the rows of the workloads --workloads names, in that order.
func compareScenarios(cmp *compareOptions) ([]bench.Scenario, error) {
	var scenarios []bench.Scenario
	for _, workload := range cmp.workloads {
		switch workload {
		case "standard":
			standard, err := bench.StandardScenarios(cmp.standard)
			if err != nil {
				return nil, err
			}
			scenarios = append(scenarios, standard...)
		case "lease":
			scenarios = append(scenarios, bench.LeaseScenarios(cmp.leaseTotal)...)
		case "list":
			scenarios = append(scenarios, bench.ListScenarios(cmp.list)...)
		default:
			return nil, fmt.Errorf("--workloads: unknown workload %q (want standard, lease or list)", workload)
		}
	}
	return scenarios, nil
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
	logger := obs.NewLogger(cmd.ErrOrStderr(), "bench", "", slog.LevelInfo)
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

// startCairnUp starts a `cairn up` stack of this binary in a fresh temporary directory, removed when it stops.
func startCairnUp(ctx context.Context, cmd *cobra.Command, members int, env []string) (*cairnUpStack, error) {
	binary, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cairn-bench-up-*")
	if err != nil {
		return nil, err
	}
	ports, err := supervisor.FreePorts(1)
	if err != nil {
		return nil, err
	}
	stack, err := localstack.New(localstack.Config{Binary: binary, DataDir: dir, Members: members, ClientPort: ports[0], Env: env,
		LogLevel: "warn", Logger: obs.NewLogger(cmd.ErrOrStderr(), "bench", "", slog.LevelWarn)})
	if err == nil {
		err = stack.Start(ctx)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "cairn up (%d members) in %s at %s\n", members, dir, strings.Join(stack.ClientEndpoints(), ","))
	return &cairnUpStack{Stack: stack, dir: dir}, nil
}

// cairnUpStack is a benchmark's own `cairn up`, whose directory goes when it stops.
type cairnUpStack struct {
	*localstack.Stack
	dir string
}

func (s *cairnUpStack) Stop(ctx context.Context) error {
	err := s.Stack.Stop(ctx)
	os.RemoveAll(s.dir)
	return err
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
