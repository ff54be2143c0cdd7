package consensus_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
	"github.com/cairn-kv/cairn/services/consensus/wal"
)

// BenchmarkCommit measures proposals committed per second on a 3-member loopback cluster (real WAL
// fsyncs, real gRPC transport) with 1, 16 and 256 concurrent proposers of 256-byte entries. A proposal
// counts as committed when the leader's Committed stream delivers it, as storage would see it. It reports
// the p50 and p99 commit latency and, for comparison, the p50 of one WAL fsync on this disk.
//
//	go test -run '^$' -bench BenchmarkCommit -benchtime 20000x -count 3 ./services/consensus/
func BenchmarkCommit(b *testing.B) {
	fsyncP50 := measureFsync(b)
	c := consensustest.Start(b, consensustest.Options{
		HeartbeatInterval: 100 * time.Millisecond, ElectionTimeout: time.Second,
		WALSegmentSize: wal.DefaultSegmentSize,
	})
	leader := c.WaitLeader(10 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	commits := consensustest.WatchCommits(ctx, leader.Node())
	for _, proposers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("proposers=%d", proposers), func(b *testing.B) {
			runProposers(b, ctx, commits, leader.Node(), proposers)
			b.ReportMetric(float64(fsyncP50.Microseconds())/1000, "fsync-p50-ms")
		})
	}
}

var benchRun int

func runProposers(b *testing.B, ctx context.Context, commits *consensustest.Commits, n *consensus.Node, proposers int) {
	benchRun++
	latencies := make([][]time.Duration, proposers)
	var wg sync.WaitGroup
	b.ReportAllocs() // the whole process's: three members, their transport, WALs and committed streams
	b.ResetTimer()
	start := time.Now()
	for p := range proposers {
		count := b.N / proposers
		if p < b.N%proposers {
			count++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := make([]byte, 256)
			for i := range count {
				copy(data, fmt.Sprintf("run%d-p%04d-%012d-", benchRun, p, i))
				began := time.Now()
				if _, err := commits.Propose(ctx, n, data); err != nil {
					b.Errorf("proposal: %v", err)
					return
				}
				latencies[p] = append(latencies[p], time.Since(began))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(latencies...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "commits/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// measureFsync returns the p50 time of saving one 256-byte entry to a WAL with fsync, on the same disk
// the cluster uses.
func measureFsync(b *testing.B) time.Duration {
	w, err := wal.Create(b.TempDir(), nil, wal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	var took []time.Duration
	data := make([]byte, 256)
	for i := uint64(1); i <= 500; i++ {
		e := &raftpb.Entry{Index: new(i), Term: new(uint64(1)), Data: data}
		began := time.Now()
		if err := w.Save(nil, nil, []*raftpb.Entry{e}, true); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(began))
	}
	slices.Sort(took)
	return took[len(took)/2]
}
