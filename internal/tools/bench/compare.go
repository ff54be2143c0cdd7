package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Target is one cluster under test, e.g. the reference etcd or a Cairn stack.
type Target struct {
	Name      string
	Endpoints []string
}

// Scenario is one row of a comparison: a workload run with the same shape against every Target.
type Scenario struct {
	Name    string
	Clients int
	Conns   int
	Total   int64
	// TargetLeader sends the requests to the leader's endpoints only (RunnerConfig.TargetLeader).
	TargetLeader bool
	// Setup, if set, runs once per target before measuring (e.g. writes the key a range reads).
	Setup func(ctx context.Context, client *clientv3.Client) error
	Op    Op
}

// CompareConfig configures Compare.
type CompareConfig struct {
	Targets   []Target
	Scenarios []Scenario
	// DialTimeout, RequestTimeout and Progress are passed to every Runner. DialTimeout also bounds the
	// probe that skips an unreachable target.
	DialTimeout    time.Duration
	RequestTimeout time.Duration
	Progress       io.Writer
}

// ComparisonResult is one (scenario, target) cell. Err is set when the target could not be measured; the
// comparison goes on with the other cells.
type ComparisonResult struct {
	Scenario string  `json:"scenario"`
	Target   string  `json:"target"`
	Summary  Summary `json:"summary"`
	Err      string  `json:"error,omitempty"`
}

// Compare runs every scenario against every target, target after target within a scenario, so the targets
// are measured under the same machine conditions. It returns early only when ctx ends.
func Compare(ctx context.Context, cfg CompareConfig) ([]ComparisonResult, error) {
	var results []ComparisonResult
	for _, scenario := range cfg.Scenarios {
		for _, target := range cfg.Targets {
			summary, err := runScenario(ctx, cfg, scenario, target)
			result := ComparisonResult{Scenario: scenario.Name, Target: target.Name, Summary: summary}
			if err != nil {
				result.Err = err.Error()
			}
			results = append(results, result)
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
		}
	}
	return results, nil
}

func runScenario(ctx context.Context, cfg CompareConfig, scenario Scenario, target Target) (Summary, error) {
	runner, err := NewRunner(RunnerConfig{
		Endpoints:      target.Endpoints,
		TargetLeader:   scenario.TargetLeader,
		Conns:          scenario.Conns,
		Clients:        scenario.Clients,
		Total:          scenario.Total,
		DialTimeout:    cfg.DialTimeout,
		RequestTimeout: cfg.RequestTimeout,
		Progress:       cfg.Progress,
	})
	if err != nil {
		return Summary{}, err
	}
	if err := runner.Start(ctx); err != nil {
		return Summary{}, err
	}
	defer runner.Stop(ctx)
	if err := probe(ctx, runner); err != nil {
		return Summary{}, fmt.Errorf("bench: %s unreachable at %v: %w", target.Name, target.Endpoints, err)
	}
	if scenario.Setup != nil {
		setupCtx, cancel := context.WithTimeout(ctx, runner.Config().RequestTimeout)
		defer cancel()
		if err := scenario.Setup(setupCtx, runner.Clients()[0]); err != nil {
			return Summary{}, fmt.Errorf("bench: setup of %q on %s: %w", scenario.Name, target.Name, err)
		}
	}
	summary, err := runner.Run(ctx, scenario.Name, scenario.Op)
	if summary.Params != nil {
		summary.Params["target"] = target.Name
	}
	return summary, err
}

// probe issues one serializable read within DialTimeout, so a dead target is reported, not waited for.
func probe(ctx context.Context, runner *Runner) error {
	ctx, cancel := context.WithTimeout(ctx, runner.Config().DialTimeout)
	defer cancel()
	_, err := runner.Clients()[0].Get(ctx, "cairn-bench-probe", clientv3.WithSerializable())
	return err
}

// StandardOptions shape StandardScenarios; zero fields take etcd's documented values.
type StandardOptions struct {
	// SingleClientTotal is the request count of the 1-client row. Default 10000.
	SingleClientTotal int64
	// ManyClientsTotal is the request count of the 1000-client rows. Default 100000.
	ManyClientsTotal int64
	// KeySize and ValSize of every put. Defaults 8 and 256.
	KeySize int
	ValSize int
	// KeySpaceSize of the put rows (sequential keys). Default 1, as in etcd's documented commands.
	KeySpaceSize int
	// RangeKey is the key the range rows read; it is written with a ValSize value before they run.
	// Default "bench-range-key".
	RangeKey string
}

func (o StandardOptions) withDefaults() StandardOptions {
	o.SingleClientTotal = cmp.Or(o.SingleClientTotal, 10000)
	o.ManyClientsTotal = cmp.Or(o.ManyClientsTotal, 100000)
	o.KeySize = cmp.Or(o.KeySize, 8)
	o.ValSize = cmp.Or(o.ValSize, 256)
	o.KeySpaceSize = cmp.Or(o.KeySpaceSize, 1)
	o.RangeKey = cmp.Or(o.RangeKey, "bench-range-key")
	return o
}

// StandardScenarios returns the rows of etcd's performance documentation (op-guide/performance):
// put with 1 client on 1 connection and with 1000 clients on 100 connections, both to the leader
// (--target-leader), and linearizable and serializable range of one key with 1000 clients on 100 connections
// spread over every endpoint.
func StandardScenarios(opts StandardOptions) ([]Scenario, error) {
	opts = opts.withDefaults()
	put, err := PutOp(PutConfig{
		Keys:    KeySpace{KeySize: opts.KeySize, KeySpaceSize: opts.KeySpaceSize, Sequential: true},
		ValSize: opts.ValSize,
	})
	if err != nil {
		return nil, err
	}
	linearizable, err := RangeOp(RangeConfig{Key: opts.RangeKey, Consistency: "l"})
	if err != nil {
		return nil, err
	}
	serializable, err := RangeOp(RangeConfig{Key: opts.RangeKey, Consistency: "s"})
	if err != nil {
		return nil, err
	}
	value, err := randomValue(opts.ValSize)
	if err != nil {
		return nil, err
	}
	writeRangeKey := func(ctx context.Context, client *clientv3.Client) error {
		_, err := client.Put(ctx, opts.RangeKey, value)
		return err
	}
	return []Scenario{
		{Name: "put, 1 client, 1 conn", Clients: 1, Conns: 1, Total: opts.SingleClientTotal, TargetLeader: true, Op: put},
		{Name: "put, 1000 clients, 100 conns", Clients: 1000, Conns: 100, Total: opts.ManyClientsTotal, TargetLeader: true,
			Op: put},
		{Name: "range linearizable, 1000 clients, 100 conns", Clients: 1000, Conns: 100, Total: opts.ManyClientsTotal,
			Setup: writeRangeKey, Op: linearizable},
		{Name: "range serializable, 1000 clients, 100 conns", Clients: 1000, Conns: 100, Total: opts.ManyClientsTotal,
			Setup: writeRangeKey, Op: serializable},
	}, nil
}

// WriteComparison prints results as one table. Within a scenario the first target is the baseline, and
// every other target's throughput is shown as a multiple of it.
func WriteComparison(w io.Writer, results []ComparisonResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tTARGET\tREQUESTS\tERRORS\tREQ/S\tVS FIRST\tAVG ms\tP50 ms\tP99 ms\tP99.9 ms\tSLOWEST ms\tNOTE")
	baseline := map[string]float64{}
	for _, r := range results {
		ms := func(sec float64) string { return strconv.FormatFloat(sec*1000, 'f', 2, 64) }
		s := r.Summary
		versus := "-"
		if first, ok := baseline[r.Scenario]; !ok {
			baseline[r.Scenario] = s.RequestsPerSec
		} else if first > 0 {
			versus = strconv.FormatFloat(s.RequestsPerSec/first, 'f', 2, 64) + "x"
		}
		if r.Err != "" && s.Requests == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\tfailed: %s\n", r.Scenario, r.Target, r.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Target, s.Requests, s.Errors,
			s.RequestsPerSec, versus, ms(s.AverageSec), ms(s.Percentile(50)), ms(s.Percentile(99)),
			ms(s.Percentile(99.9)), ms(s.SlowestSec), r.Err)
	}
	return tw.Flush()
}
