package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// unreachable is never dialled: the ops below do not use their client, and clientv3 connects lazily.
const unreachable = "127.0.0.1:1"

func startRunner(t *testing.T, cfg RunnerConfig) *Runner {
	t.Helper()
	if cfg.Endpoints == nil {
		cfg.Endpoints, cfg.LazyConnect = []string{unreachable}, true
	}
	runner, err := NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Stop(context.Background()) })
	return runner
}

func TestStartFailsFastOnADeadEndpoint(t *testing.T) {
	t.Parallel()
	runner, err := NewRunner(RunnerConfig{Endpoints: []string{unreachable}, Total: 1, DialTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = runner.Start(context.Background())
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Start against a dead endpoint = %v, want ErrUnreachable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Start took %s to give up, want about the dial timeout", took)
	}
}

func TestRunnerConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     RunnerConfig
		wantErr string
	}{
		{"total bound", RunnerConfig{Endpoints: []string{unreachable}, Total: 1}, ""},
		{"duration bound", RunnerConfig{Endpoints: []string{unreachable}, Duration: time.Second}, ""},
		{"no bound", RunnerConfig{Endpoints: []string{unreachable}}, "so the run ends"},
		{"no endpoints", RunnerConfig{Total: 1}, "no endpoints"},
		{"negative clients", RunnerConfig{Endpoints: []string{unreachable}, Total: 1, Clients: -1}, "negative"},
		{"negative rate", RunnerConfig{Endpoints: []string{unreachable}, Total: 1, Rate: -5}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewRunner(tt.cfg)
			if (tt.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewRunner = %v, want error %q", err, tt.wantErr)
			}
		})
	}
}

func TestRunnerIssuesEverySeqOnce(t *testing.T) {
	var progress bytes.Buffer
	runner := startRunner(t, RunnerConfig{Clients: 8, Conns: 2, Total: 500, Progress: &progress})
	var mu sync.Mutex
	seen := map[int64]int{}
	summary, err := runner.Run(context.Background(), "count", func(_ context.Context, _ *clientv3.Client, seq int64) error {
		mu.Lock()
		defer mu.Unlock()
		seen[seq]++
		if seq%5 == 0 {
			return errors.New("every fifth fails")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 500 {
		t.Fatalf("%d distinct seqs, want 500", len(seen))
	}
	for seq := range int64(500) {
		if seen[seq] != 1 {
			t.Fatalf("seq %d issued %d times", seq, seen[seq])
		}
	}
	if summary.Requests != 400 || summary.Errors != 100 || summary.ErrorCounts["every fifth fails"] != 100 {
		t.Errorf("requests %d errors %v", summary.Requests, summary.ErrorCounts)
	}
	if summary.Params["clients"] != "8" || summary.Params["conns"] != "2" || summary.Name != "count" {
		t.Errorf("params %v name %q", summary.Params, summary.Name)
	}
	if !strings.Contains(progress.String(), "500 / 500") {
		t.Errorf("progress bar output: %q", progress.String())
	}
}

func TestRunnerClientsShareConnections(t *testing.T) {
	runner := startRunner(t, RunnerConfig{Clients: 5, Conns: 2, Total: 1})
	clients := runner.Clients()
	if len(clients) != 5 || clients[0] != clients[2] || clients[2] != clients[4] || clients[1] != clients[3] || clients[0] == clients[1] {
		t.Fatalf("clients do not share 2 connections round-robin: %p", clients)
	}
}

func TestRunnerBounds(t *testing.T) {
	tests := []struct {
		name       string
		cfg        RunnerConfig
		minElapsed time.Duration
		wantCount  int
	}{
		// Burst 1: the first request goes at once, then one every 10ms.
		{"rate", RunnerConfig{Clients: 4, Total: 20, Rate: 100}, 190 * time.Millisecond, 20},
		{"duration without total", RunnerConfig{Clients: 2, Duration: 200 * time.Millisecond}, 200 * time.Millisecond, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runner := startRunner(t, tt.cfg)
			var calls atomic.Int64
			began := time.Now()
			summary, err := runner.Run(context.Background(), tt.name, func(context.Context, *clientv3.Client, int64) error {
				calls.Add(1)
				time.Sleep(time.Millisecond) // a 1ms request
				return nil
			})
			elapsed := time.Since(began)
			if err != nil {
				t.Fatal(err)
			}
			if elapsed < tt.minElapsed || elapsed > tt.minElapsed+10*time.Second {
				t.Errorf("run took %s, want at least %s (and bounded)", elapsed, tt.minElapsed)
			}
			if tt.wantCount >= 0 && summary.Requests != tt.wantCount || summary.Requests != int(calls.Load()) || summary.Requests == 0 {
				t.Errorf("requests %d, calls %d, want %d", summary.Requests, calls.Load(), tt.wantCount)
			}
		})
	}
}

func TestRunnerStopsOnCancel(t *testing.T) {
	runner := startRunner(t, RunnerConfig{Clients: 4, Total: 1_000_000})
	ctx, cancel := context.WithCancel(context.Background())
	var completed atomic.Int64
	done := make(chan struct{})
	var summary Summary
	var err error
	go func() {
		defer close(done)
		summary, err = runner.Run(ctx, "cancel", func(ctx context.Context, _ *clientv3.Client, seq int64) error {
			if completed.Add(1) > 20 {
				<-ctx.Done() // a server that stopped answering
				return ctx.Err()
			}
			return nil
		})
	}()
	for completed.Load() < 24 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run error = %v, want context.Canceled", err)
	}
	if summary.Requests != 20 || summary.Errors != 0 {
		t.Errorf("requests %d errors %d: cancelled calls must not count", summary.Requests, summary.Errors)
	}
}

func TestRunnerDriveLetsOpRecordItsOwnSamples(t *testing.T) {
	runner := startRunner(t, RunnerConfig{Clients: 3, Total: 30})
	report := NewReport("fan-out")
	summary, err := runner.Drive(context.Background(), report, func(_ context.Context, _ *clientv3.Client, seq int64) error {
		if seq == 0 {
			return errors.New("first request fails")
		}
		report.Record(time.Millisecond, nil) // e.g. two watchers each seeing the put
		report.Record(2*time.Millisecond, nil)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if summary.Requests != 58 || summary.Errors != 1 || summary.SlowestSec != 0.002 || summary.Name != "fan-out" {
		t.Fatalf("requests %d errors %d slowest %v name %q", summary.Requests, summary.Errors, summary.SlowestSec, summary.Name)
	}
}

func TestRunnerTargetLeaderConnectsToTheLeaderOnly(t *testing.T) {
	cluster := etcdreftest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, targetLeader := range []bool{false, true} {
		runner := startRunner(t, RunnerConfig{Endpoints: cluster.Endpoints(), Conns: 6, Total: 1, TargetLeader: targetLeader})
		leaders := 0
		for _, conn := range runner.conns {
			status, err := conn.Status(ctx, conn.Endpoints()[0])
			if err != nil {
				t.Fatal(err)
			}
			if status.Header.MemberId == status.Leader {
				leaders++
			}
		}
		switch {
		case targetLeader && leaders != 6:
			t.Errorf("with TargetLeader %d of 6 connections reach the leader, want all", leaders)
		case !targetLeader && leaders != 2:
			t.Errorf("without TargetLeader %d of 6 connections reach the leader, want 2 (spread over 3 members)", leaders)
		}
	}
}

func TestRunnerTargetLeaderWithoutLeader(t *testing.T) {
	_, err := leaderEndpoints(context.Background(), RunnerConfig{Endpoints: []string{unreachable}, DialTimeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no endpoint knows a leader") {
		t.Fatalf("leaderEndpoints of an unreachable cluster: %v, want no endpoint knows a leader", err)
	}
}
