package consensus_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/testing/memnet"
	"github.com/cairn-kv/cairn/internal/testing/metricstest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
	"github.com/cairn-kv/cairn/services/consensus/wal"
)

// payloadsIn returns the normal entries' payloads of a log.
func payloadsIn(log []commitlog.Entry) map[string]bool {
	out := map[string]bool{}
	for _, e := range log {
		if e.Kind == commitlog.KindNormal {
			out[string(e.Data)] = true
		}
	}
	return out
}

func requireAll(t *testing.T, who string, have, want map[string]bool) {
	t.Helper()
	for p := range want {
		if !have[p] {
			t.Fatalf("%s lost acknowledged entry %q", who, p)
		}
	}
}

func waitCaughtUp(t *testing.T, c *consensustest.Cluster, m *consensustest.Member, index uint64) {
	t.Helper()
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, fmt.Sprintf("%s to apply index %d", m.Name, index), func() bool {
		st, err := m.Node().Status(context.Background())
		return err == nil && st.AppliedIndex >= index
	})
}

func others(c *consensustest.Cluster, not *consensustest.Member) []*consensustest.Member {
	var out []*consensustest.Member
	for _, m := range c.Members() {
		if m != not {
			out = append(out, m)
		}
	}
	return out
}

func TestKilledLeaderIsReplacedAndCatchesUpAfterRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: the election on the bubble's fake clock
		opts := consensustest.Options{Network: memnet.New()}
		c := consensustest.Start(t, opts)
		old := c.WaitLeader(5 * time.Second)
		acked, highest := proposeAll(t, []*consensustest.Member{old}, 500, 8, "before-kill")

		killed := time.Now()
		old.Kill()
		survivors := others(c, old)
		var leader *consensustest.Member
		waittest.Until(t, 5*time.Second, 5*time.Millisecond, "a new leader among the survivors", func() bool {
			lead := survivors[0].Node().Leader()
			for _, m := range survivors {
				if lead != 0 && m.Node().Leader() == lead && m.Node().ID() == lead {
					leader = m
				}
			}
			return leader != nil && survivors[1].Node().Leader() == lead
		})
		// The survivors wait out their election timeouts from the last heartbeat (at most one heartbeat before
		// the kill), and pre-vote is refused while either still counts the dead leader's lease.
		et, hb := c.Options().ElectionTimeout, c.Options().HeartbeatInterval
		took := time.Since(killed)
		if took > 3*et || took < et-hb {
			t.Errorf("new leader after %v, want between one election timeout less a heartbeat and 3 election timeouts (%v)", took, et)
		}
		t.Logf("new leader after %v", took)
		for _, m := range survivors {
			requireAll(t, m.Name, payloadsIn(readLog(t, m.Node(), highest)), acked)
		}

		more, highest := proposeAll(t, survivors, 500, 8, "after-kill")
		if err := old.Restart(); err != nil {
			t.Fatal(err)
		}
		waitCaughtUp(t, c, old, highest)
		log := readLog(t, old.Node(), highest)
		requireAll(t, "restarted old leader", payloadsIn(log), acked)
		requireAll(t, "restarted old leader", payloadsIn(log), more)
		want := readLog(t, leader.Node(), highest)
		for i := range want {
			if log[i].Index != want[i].Index || log[i].Term != want[i].Term || string(log[i].Data) != string(want[i].Data) {
				t.Fatalf("restarted member differs from the leader at index %d", want[i].Index)
			}
		}
	})
}

// TestPartitionedFollowerCatchesUpBySnapshot: a follower cut off while the leader's log moved past the catch-up
// window catches up by a snapshot, whether the leader's log was compacted at a snapshot saved to the WAL
// (SnapshotCount) or trimmed in memory between two.
func TestPartitionedFollowerCatchesUpBySnapshot(t *testing.T) {
	for _, tc := range []struct {
		name          string
		snapshotCount uint64
	}{{"saved snapshots", 200}, {"trimmed in memory", 1 << 30}} {
		t.Run(tc.name, func(t *testing.T) { partitionedFollowerCatchesUp(t, tc.snapshotCount) })
	}
}

func partitionedFollowerCatchesUp(t *testing.T, snapshotCount uint64) {
	c := consensustest.Start(t, consensustest.Options{StateMachines: true, SnapshotCount: snapshotCount, SnapshotCatchUpEntries: 100})
	leader := c.WaitLeader(5 * time.Second)
	follower := others(c, leader)[0]
	c.Partition(follower)
	_, highest := proposeAll(t, []*consensustest.Member{leader}, 1500, 8, "while-partitioned")
	// The leader's log no longer starts where the follower stopped: reading it from 1 starts with a snapshot.
	first := readLog(t, leader.Node(), 1)[0]
	if first.Kind != commitlog.KindSnapshot || first.Snapshot.SourceMemberID != leader.Node().ID() {
		t.Fatalf("leader's log from index 1 starts with %+v, want a snapshot naming the leader", first)
	}
	if follower.Machine().Applied() >= first.Index {
		t.Fatalf("follower applied %d before healing; the partition did not hold", follower.Machine().Applied())
	}

	c.Heal(follower)
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, "the follower's state machine to catch up", func() bool {
		return follower.Machine().Applied() >= highest
	})
	if follower.Machine().SnapshotsInstalled() == 0 {
		t.Fatal("the follower caught up without installing a snapshot")
	}
	waitStatesAgree(t, c, leader)
}

// waitStatesAgree waits until every member's state machine has applied what the leader's has, and fails at
// the first entry where one differs.
func waitStatesAgree(t *testing.T, c *consensustest.Cluster, leader *consensustest.Member) {
	t.Helper()
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, "every state machine to agree", func() bool {
		applied, want := leader.Machine().State()
		for _, m := range c.Members() {
			a, got := m.Machine().State()
			if a != applied || len(got) != len(want) {
				return false
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s applied %+v at position %d, leader %+v", m.Name, got[i], i, want[i])
				}
			}
		}
		return true
	})
}

func TestAcknowledgedEntriesSurviveKillingEveryMember(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	members := c.Members()
	commits := make([]*consensustest.Commits, len(members))
	for i, m := range members {
		commits[i] = consensustest.WatchCommits(ctx, m.Node())
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	enough := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && i < 100000; i++ {
				which := rand.N(len(members))
				data := fmt.Appendf(nil, "durable-%d-%d", w, i)
				attempt, cancelAttempt := context.WithTimeout(ctx, time.Second)
				_, err := commits[which].Propose(attempt, members[which].Node(), data)
				cancelAttempt()
				if err != nil {
					continue
				}
				mu.Lock()
				acked[string(data)] = true
				if len(acked) == 2000 {
					close(enough)
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatal("2000 acknowledgements took over 30 s")
	}
	// Kill while proposals are still in flight, right after the last acknowledgements.
	c.KillAll()
	mu.Lock()
	want := maps(acked)
	mu.Unlock()
	cancel()
	wg.Wait()

	for _, m := range members {
		if err := m.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	// A new leader knows everything a quorum logged, but its commit index reaches past the old entries only once
	// an entry of its own term commits (the one it appends on election, or this one): read up to that.
	leader := c.WaitLeader(10 * time.Second)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	proposeCtx, cancelPropose := context.WithTimeout(watchCtx, 10*time.Second)
	defer cancelPropose()
	upTo, err := consensustest.WatchCommits(watchCtx, leader.Node()).Propose(proposeCtx, leader.Node(), []byte("after-restart"))
	if err != nil {
		t.Fatalf("proposing after the restart: %v", err)
	}
	for _, m := range members {
		waitCaughtUp(t, c, m, upTo)
		requireAll(t, m.Name+" after restart", payloadsIn(readLog(t, m.Node(), upTo)), want)
	}
}

func maps(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// tailOf opens a stopped member's WAL to find where its valid records end.
func tailOf(t *testing.T, m *consensustest.Member) (string, int64) {
	t.Helper()
	w, _, err := wal.Open(filepath.Join(m.DataDir, "wal"), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	return w.Tail()
}

// killCaughtUpFollower commits count entries, waits until a follower has them, and kills it.
func killCaughtUpFollower(t *testing.T, count int) (c *consensustest.Cluster, leader, victim *consensustest.Member, acked map[string]bool) {
	c = consensustest.Start(t, consensustest.Options{})
	leader = c.WaitLeader(5 * time.Second)
	victim = others(c, leader)[0]
	acked, highest := proposeAll(t, []*consensustest.Member{leader}, count, 4, "before-kill")
	waitCaughtUp(t, c, victim, highest)
	victim.Kill()
	return c, leader, victim, acked
}

func TestTornWALTailAfterKillRecovers(t *testing.T) {
	c, leader, victim, acked := killCaughtUpFollower(t, 300)

	// A record cut off by the crash: a header promising 4 KiB, followed by a few bytes.
	path, end := tailOf(t, victim)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x00, 0x10, 0, 0, 0xde, 0xad, 0xbe, 0xef, 2, 'p', 'a', 'r', 't'}, end); err != nil {
		t.Fatal(err)
	}
	f.Close()

	if err := victim.Restart(); err != nil {
		t.Fatalf("restart after a torn tail: %v", err)
	}
	more, highest := proposeAll(t, []*consensustest.Member{leader}, 100, 4, "after-torn")
	waitCaughtUp(t, c, victim, highest)
	log := payloadsIn(readLog(t, victim.Node(), highest))
	requireAll(t, "repaired member", log, acked)
	requireAll(t, "repaired member", log, more)
}

func TestCorruptWALRecordRefusesToStart(t *testing.T) {
	_, _, victim, _ := killCaughtUpFollower(t, 100)

	path, _ := tailOf(t, victim)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The first segment starts with its metadata record (9-byte header, 16-byte payload); flip a byte of
	// the record after it.
	const secondRecord = 25
	data[secondRecord+5] ^= 0x55
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	err = victim.Restart()
	want := fmt.Sprintf("%s at offset %d", path, secondRecord)
	if err == nil || !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("restart with a corrupt record = %v, want wal.ErrCorrupt naming %q", err, want)
	}
}

func TestCommittedFromACompactedIndexStartsWithASnapshot(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{StateMachines: true, SnapshotCount: 100, SnapshotCatchUpEntries: 10})
	leader := c.WaitLeader(5 * time.Second)
	_, highest := proposeAll(t, c.Members(), 400, 4, "compact")
	for _, m := range c.Members() {
		logStartsWithASnapshot(t, m, "compact", highest)
	}
	_ = leader
}

// logStartsWithASnapshot waits until m's log, read up to highest, starts with a usable snapshot reference that
// the entries after it follow without a hole (what waiting names: "compact", "trim its log"), and returns that
// snapshot's index.
func logStartsWithASnapshot(t *testing.T, m *consensustest.Member, waiting string, highest uint64) uint64 {
	t.Helper()
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, m.Name+" to "+waiting, func() bool {
		return readLog(t, m.Node(), 1)[0].Kind == commitlog.KindSnapshot
	})
	log := readLog(t, m.Node(), highest)
	snap := log[0]
	if snap.Snapshot == nil || snap.Snapshot.Index != snap.Index || snap.Snapshot.SourceStorageURL == "" {
		t.Fatalf("%s: first entry %+v is not a usable snapshot reference", m.Name, snap)
	}
	for i, e := range log[1:] {
		if e.Index != snap.Index+uint64(i)+1 {
			t.Fatalf("%s: entry %d follows the snapshot at %d with a hole", m.Name, e.Index, snap.Index)
		}
	}
	return snap.Index
}

// TestLogTrimmedInMemoryBetweenSnapshots: long before SnapshotCount entries, the log in memory is trimmed to the
// catch-up window (Committed then starts with a snapshot, and what follows it has no hole), while the WAL keeps
// its own snapshot: a restarted member replays the whole log from the WAL.
func TestLogTrimmedInMemoryBetweenSnapshots(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{StateMachines: true, SnapshotCount: 1 << 30, SnapshotCatchUpEntries: 10})
	c.WaitLeader(5 * time.Second)
	_, highest := proposeAll(t, c.Members(), 1200, 8, "trim")
	for _, m := range c.Members() {
		if kept := highest - logStartsWithASnapshot(t, m, "trim its log", highest); kept > 10+1000+100 {
			t.Errorf("%s: %d entries kept above the snapshot, want about the catch-up window (10) and the slack", m.Name, kept)
		}
	}
	victim := c.Members()[0]
	victim.Kill()
	// The WAL itself, read between the kill and the restart: once restarted, the member trims its log in
	// memory again as soon as its state machine has re-applied it, so its log says nothing about the WAL.
	w, st, err := wal.Open(filepath.Join(victim.DataDir, "wal"), wal.Options{NoPreallocate: true})
	if err != nil {
		t.Fatalf("%s: open its WAL: %v", victim.Name, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if at := st.Snapshot.GetMetadata().GetIndex(); at != 0 {
		t.Fatalf("%s: the WAL saved a snapshot at %d; the trims in memory must save none", victim.Name, at)
	}
	if len(st.Entries) == 0 {
		t.Fatalf("%s: the WAL holds no entries", victim.Name)
	}
	if first, last := st.Entries[0].GetIndex(), st.Entries[len(st.Entries)-1].GetIndex(); first != 1 || last < highest {
		t.Fatalf("%s: the WAL holds entries %d to %d, want every entry from 1 to at least %d", victim.Name, first, last, highest)
	}
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := readLog(t, victim.Node(), highest); got[len(got)-1].Index < highest {
		t.Fatalf("%s after a restart: its log ends at %d, before %d", victim.Name, got[len(got)-1].Index, highest)
	}
}

var _ = consensus.ErrRemoved

// TestPartitionedFollowerCatchesUpFromTheWAL: a follower further behind than the log in memory, but within the
// catch-up window, catches up from entries the leader reads back from its WAL, across segments, and installs
// no snapshot.
func TestPartitionedFollowerCatchesUpFromTheWAL(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{StateMachines: true, SnapshotCount: 1 << 30, WALSegmentSize: 16 << 10,
		Configure: func(cfg *consensus.Config) { cfg.LogEntriesInMemory = 50 }})
	leader := c.WaitLeader(5 * time.Second)
	follower := others(c, leader)[0]
	c.Partition(follower)
	_, highest := proposeAll(t, []*consensustest.Member{leader}, 1500, 8, "behind-memory")
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the leader's state machine to apply", func() bool {
		return leader.Machine().Applied() >= highest
	})
	behind := highest - follower.Machine().Applied()
	if behind < 1000 {
		t.Fatalf("follower applied %d of %d before healing; the partition did not hold", follower.Machine().Applied(), highest)
	}
	readBack := func() float64 {
		v, _ := metricstest.Value(metricstest.Gather(t, leader.Registry()), "cairn_consensus_log_entries_read_back_total")
		return v
	}
	before := readBack()

	c.Heal(follower)
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, "the follower's state machine to catch up", func() bool {
		return follower.Machine().Applied() >= highest
	})
	if n := follower.Machine().SnapshotsInstalled(); n != 0 {
		t.Fatalf("the follower installed %d snapshots; the catch-up window holds every entry it missed", n)
	}
	// Memory holds 50 entries below the applied index, and up to memorySlack (100) more before a trim.
	if read := readBack() - before; read < float64(behind-200) {
		t.Fatalf("the leader read %.0f entries back from its WAL for a follower %d behind, want all but the ~150 in memory",
			read, behind)
	}
	if got := readLog(t, leader.Node(), highest); got[0].Kind == commitlog.KindSnapshot || got[0].Index != 1 {
		t.Fatalf("the leader's log from 1 starts with %+v, want entry 1 read back from its WAL", got[0])
	}
	waitStatesAgree(t, c, leader)
}

// TestRestartAfterTheWindowReleasedSegments: while snapshots are taken and the catch-up window moves, the log
// read from inside the window below what memory holds comes back from the WAL entry by entry; the segments
// below the window are removed; and a member killed and restarted replays what is left of its WAL and follows
// the log again.
func TestRestartAfterTheWindowReleasedSegments(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{StateMachines: true, SnapshotCount: 500, SnapshotCatchUpEntries: 200,
		WALSegmentSize: 8 << 10, Configure: func(cfg *consensus.Config) { cfg.LogEntriesInMemory = 20 }})
	leader := c.WaitLeader(5 * time.Second)
	payloads, highest := proposeAll(t, c.Members(), 3000, 8, "release")
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, "every state machine to apply", func() bool {
		for _, m := range c.Members() {
			if m.Machine().Applied() < highest {
				return false
			}
		}
		return true
	})

	// Memory holds at most 120 entries below the applied index, at or above the snapshot; the window reaches
	// 200 below the snapshot.
	snap := logStartsWithASnapshot(t, leader, "compact", highest)
	from := snap - 150
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	log, err := consensustest.ReadLogFrom(ctx, leader.Node(), from, highest)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range log {
		if e.Index != from+uint64(i) || e.Kind == commitlog.KindSnapshot {
			t.Fatalf("entry %d of the log read from %d is %+v, want entry %d", i, from, e, from+uint64(i))
		}
		if e.Kind == commitlog.KindNormal && !payloads[string(e.Data)] {
			t.Fatalf("entry %d read back holds %q, which was never proposed", e.Index, e.Data)
		}
	}
	if v, _ := metricstest.Value(metricstest.Gather(t, leader.Registry()), "cairn_consensus_log_entries_read_back_total"); v == 0 {
		t.Fatal("the leader read nothing back from its WAL for a log read from below its memory")
	}

	victim := others(c, leader)[0]
	segments, err := filepath.Glob(filepath.Join(victim.DataDir, "wal", "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	for _, seg := range segments {
		if strings.HasPrefix(filepath.Base(seg), "0000000000000000-") {
			t.Fatalf("%s: the first segment, %s, is still there; the window moved far past it", victim.Name, seg)
		}
	}
	victim.Kill()
	if err := victim.Restart(); err != nil {
		t.Fatalf("%s: restart after its WAL released segments: %v", victim.Name, err)
	}
	_, highest = proposeAll(t, others(c, victim), 300, 4, "after-restart")
	// The harness's state machine cannot restart from its own snapshot (it keeps its state in memory), so the
	// restarted member's log is read instead: a snapshot, then every entry up to the new proposals.
	logStartsWithASnapshot(t, victim, "replay its WAL", highest)
}
