package storage_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/storage"
	"github.com/cairn-kv/cairn/services/storage/mvcc/mvcctest"
)

// waitCompacted waits until every member's storage has compacted to want(its revision).
func waitCompacted(t *testing.T, c *clustertest.Cluster, want func(rev int64) int64) {
	t.Helper()
	waittest.Until(t, 20*time.Second, 20*time.Millisecond, "every member compacted", func() bool {
		for _, m := range c.Members() {
			st, err := m.Storage().Status(context.Background())
			if err != nil || st.CompactRevision == 0 || st.CompactRevision != want(st.Revision) {
				return false
			}
		}
		return true
	})
}

// loggedCompactions returns the proposer of every Compaction entry in the committed log, by revision.
func loggedCompactions(t *testing.T, m *clustertest.Member) map[int64][]uint64 {
	t.Helper()
	st, err := m.Node().Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64][]uint64{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := errors.New("read to the commit index")
	err = m.Node().Committed(ctx, 1, func(entries []commitlog.Entry) error {
		for _, e := range entries {
			var entry storagepb.Entry
			if e.Kind == commitlog.KindNormal && proto.Unmarshal(e.Data, &entry) == nil && entry.GetRequest().GetCompaction() != nil {
				rev := entry.Request.Compaction.Revision
				out[rev] = append(out[rev], entry.ProposerMember)
			}
			if e.Index >= st.CommitIndex {
				return done
			}
		}
		return nil
	})
	if !errors.Is(err, done) {
		t.Fatalf("reading the log: %v", err)
	}
	return out
}

// TestAutoCompaction runs etcd's two auto-compaction modes on a 3-member cluster: the leader's storage alone
// proposes, each compaction once, and an old revision then reads as etcd's "required revision has been compacted".
func TestAutoCompaction(t *testing.T) {
	tests := []struct {
		name      string
		configure func(*storage.Config)
		// compacted is the compact revision expected once writes stop at rev.
		compacted func(rev int64) int64
	}{
		{name: "revision keeps the last 5", configure: func(cfg *storage.Config) {
			cfg.AutoCompactionMode, cfg.AutoCompactionRetention = storage.AutoCompactionRevision, "5"
			cfg.AutoCompactionRevisionInterval = 50 * time.Millisecond
		}, compacted: func(rev int64) int64 { return rev - 5 }},
		{name: "periodic with a 1s retention", configure: func(cfg *storage.Config) {
			cfg.AutoCompactionMode, cfg.AutoCompactionRetention = storage.AutoCompactionPeriodic, "1s"
		}, compacted: func(rev int64) int64 { return rev }}, // after a quiet second, the revision a period ago is the last
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := clustertest.Start(t, clustertest.Options{ConfigureStorage: tc.configure})
			cli := c.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			first, err := cli.Put(ctx, "k", "v0")
			if err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				if _, err := cli.Put(ctx, "k", fmt.Sprintf("v%d", i+1)); err != nil {
					t.Fatal(err)
				}
			}
			waitCompacted(t, c, tc.compacted)

			st, err := c.Members()[0].Storage().Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Get(ctx, "k", clientv3.WithRev(st.CompactRevision)); err != nil {
				t.Fatalf("get at the compact revision %d: %v", st.CompactRevision, err)
			}
			_, err = cli.Get(ctx, "k", clientv3.WithRev(st.CompactRevision-1))
			if !errors.Is(err, rpctypes.ErrCompacted) {
				t.Fatalf("get below the compact revision %d: %v, want %v", st.CompactRevision, err, rpctypes.ErrCompacted)
			}
			_, err = cli.Get(ctx, "k", clientv3.WithRev(first.Header.Revision))
			if !errors.Is(err, rpctypes.ErrCompacted) || !strings.Contains(err.Error(), "mvcc: required revision has been compacted") {
				t.Fatalf("get at compacted revision %d: %v, want %v", first.Header.Revision, err, rpctypes.ErrCompacted)
			}
			leader := c.Leader(5 * time.Second)
			proposed := loggedCompactions(t, leader)
			if len(proposed) == 0 {
				t.Fatal("no compaction in the log")
			}
			for rev, proposers := range proposed {
				if len(proposers) != 1 || proposers[0] != leader.ID() {
					t.Fatalf("compaction at %d proposed by %x, want once by the leader %x", rev, proposers, leader.ID())
				}
			}
		})
	}
}

// TestCorruptionDetected changes a value inside one follower's bbolt file while its storage is stopped, then
// restarts it: with the initial check it refuses to start, as etcd; with the compact hash check the leader's
// storage finds the follower's compaction hash differs after the next compaction, raises CORRUPT for it through
// the log, and the cluster refuses writes with etcd's "corrupt cluster".
func TestCorruptionDetected(t *testing.T) {
	tests := []struct {
		name      string
		configure func(*storage.Config)
	}{
		{name: "initial check", configure: func(cfg *storage.Config) { cfg.InitialCorruptCheck = true }},
		{name: "compact hash check", configure: func(cfg *storage.Config) {
			cfg.CompactHashCheckEnabled, cfg.CompactHashCheckTime = true, 50*time.Millisecond
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := clustertest.Start(t, clustertest.Options{ConfigureStorage: tc.configure})
			cli := c.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range 10 {
				if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i%3), fmt.Sprint(i)); err != nil {
					t.Fatal(err)
				}
			}
			leader := c.Leader(5 * time.Second)
			var victim *clustertest.Member
			for _, m := range c.Members() {
				if m != leader {
					victim = m
					break
				}
			}
			waittest.Until(t, 10*time.Second, 10*time.Millisecond, "the victim caught up", func() bool {
				mine, err1 := victim.Storage().Status(ctx)
				theirs, err2 := leader.Storage().Status(ctx)
				return err1 == nil && err2 == nil && mine.Revision == theirs.Revision
			})
			victim.StopStorage()
			if _, err := mvcctest.TamperValue(filepath.Join(victim.StorageDataDir(), "storage.db"), []byte("k1"), []byte("evil")); err != nil {
				t.Fatal(err)
			}
			err := victim.StartStorage()
			if tc.name == "initial check" {
				if !errors.Is(err, storage.ErrCorrupt) {
					t.Fatalf("restart of the changed member: %v, want %v", err, storage.ErrCorrupt)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			head, err := cli.Get(ctx, "k0")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Compact(ctx, head.Header.Revision); err != nil {
				t.Fatal(err)
			}
			waittest.Until(t, 20*time.Second, 20*time.Millisecond, "the CORRUPT alarm", func() bool {
				resp, err := cli.AlarmList(ctx)
				return err == nil && len(resp.Alarms) == 1 && resp.Alarms[0].MemberID == victim.ID() &&
					resp.Alarms[0].Alarm.String() == "CORRUPT"
			})
			if _, err := cli.Put(ctx, "k0", "after"); !errors.Is(err, rpctypes.ErrCorrupt) {
				t.Fatalf("put with the CORRUPT alarm: %v, want %v", err, rpctypes.ErrCorrupt)
			}
			if _, err := cli.Get(ctx, "k0"); err != nil {
				t.Fatalf("get with the CORRUPT alarm (etcd serves reads): %v", err)
			}
		})
	}
}
