package mvcc

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// crashLog is a deterministic log of writes: the same seed gives the same entries in every process.
func crashLog(seed int64, n int) []*pb.InternalRaftRequest {
	r := rand.New(rand.NewSource(seed))
	log := make([]*pb.InternalRaftRequest, 0, n)
	rev := int64(1)
	for len(log) < n {
		key := fmt.Sprintf("k%03d", r.Intn(50))
		switch x := r.Intn(20); {
		case x < 12:
			log = append(log, put(key, fmt.Sprint(r.Int63())))
			rev++
		case x < 14:
			log = append(log, del(key, fmt.Sprintf("k%03d", r.Intn(50)+3), false))
		case x < 16:
			log = append(log, txn(cmps(cmp(key, "", cVersion, gt, 1)), ops(put(key, "t"), del("k999", "", false)), ops(put("k998", key))))
		case x < 17:
			log = append(log, grant(int64(r.Intn(4)+1), 60))
		case x < 18:
			log = append(log, put(key, "leased", withLease(int64(r.Intn(4)+1))))
		case x < 19:
			log = append(log, revoke(int64(r.Intn(4)+1)))
		default:
			log = append(log, compact(max(1, rev-int64(r.Intn(20)))))
		}
	}
	return log
}

// applyFrom applies log entries after the store's applied index, up to stop (exclusive index into log).
func applyFrom(t testing.TB, s *Store, log []*pb.InternalRaftRequest, stop int) {
	for i := int(s.Position().AppliedIndex); i < stop; i++ {
		if _, err := s.Apply(uint64(i+1), 1, log[i]); err != nil {
			t.Fatalf("apply index %d: %v", i+1, err)
		}
	}
}

func referenceHash(t *testing.T, log []*pb.InternalRaftRequest) uint32 {
	ref := openTestStore(t, Config{})
	applyFrom(t, ref.Store, log, len(log))
	h, err := ref.Hash(0)
	if err != nil {
		t.Fatal(err)
	}
	return h.Hash
}

// TestCrashDropHandleReplay drops the bbolt handle without committing at random points (losing what was applied
// since the last commit), reopens, replays the same log from the store's consistent index, and must end with the
// hash of a store that never crashed.
func TestCrashDropHandleReplay(t *testing.T) {
	t.Parallel()
	log := crashLog(7, 3000)
	want := referenceHash(t, log)
	path := filepath.Join(t.TempDir(), "storage.db")
	r := rand.New(rand.NewSource(99))
	cfg := Config{Path: path, BatchLimit: 97, CompactionBatchLimit: 13}
	lost, lastStop := 0, 0
	for crashes := 0; ; crashes++ {
		ts := openTestStore(t, cfg)
		applied := int(ts.Position().AppliedIndex)
		if applied < lastStop {
			lost++
		}
		if applied == len(log) {
			if lost == 0 {
				t.Fatalf("no crash lost uncommitted entries; the test proves nothing")
			}
			h, _ := ts.Hash(0)
			if h.Hash != want {
				t.Fatalf("after %d crashes hash %d, want %d", crashes, h.Hash, want)
			}
			return
		}
		stop := min(len(log), applied+1+r.Intn(400))
		if crashes >= 12 {
			stop = len(log)
		}
		applyFrom(t, ts.Store, log, stop)
		lastStop = stop
		if r.Intn(3) == 0 {
			if err := ts.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		if stop == len(log) {
			if err := ts.Close(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := ts.Abandon(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCrashKill9Replay runs the apply loop in a child process that kill -9s itself at a random entry, again and
// again, each time reopening the store and replaying the log from its consistent index; the final hash must be
// that of a store that never crashed.
func TestCrashKill9Replay(t *testing.T) {
	if os.Getenv("CAIRN_CRASH_CHILD") != "" {
		crashChild(t)
		return
	}
	const n = 3000
	want := referenceHash(t, crashLog(11, n))
	path := filepath.Join(t.TempDir(), "storage.db")
	kills := 0
	for run := 0; run < 20; run++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashKill9Replay$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CAIRN_CRASH_CHILD=1", "CAIRN_CRASH_PATH="+path,
			"CAIRN_CRASH_SEED="+strconv.Itoa(run), "CAIRN_CRASH_FINISH="+strconv.FormatBool(run >= 8))
		out, err := cmd.CombinedOutput()
		if err == nil {
			break
		}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("child run %d failed: %v\n%s", run, err, out)
		}
		kills++
	}
	if kills == 0 {
		t.Fatalf("the child never crashed")
	}
	ts := openTestStore(t, Config{Path: path})
	if p := ts.Position(); p.AppliedIndex != n {
		t.Fatalf("after %d kills applied index %d, want %d", kills, p.AppliedIndex, n)
	}
	h, _ := ts.Hash(0)
	if h.Hash != want {
		t.Fatalf("after %d kills hash %d, want %d", kills, h.Hash, want)
	}
}

func crashChild(t *testing.T) {
	log := crashLog(11, 3000)
	seed, _ := strconv.Atoi(os.Getenv("CAIRN_CRASH_SEED"))
	r := rand.New(rand.NewSource(int64(seed)))
	s, err := Open(Config{Path: os.Getenv("CAIRN_CRASH_PATH"), BatchLimit: 50 + r.Intn(200)})
	if err != nil {
		t.Fatal(err)
	}
	applied := int(s.Position().AppliedIndex)
	killAt := applied + 1 + r.Intn(600)
	if os.Getenv("CAIRN_CRASH_FINISH") == "true" {
		killAt = -1
	}
	for i := applied; i < len(log); i++ {
		if i == killAt {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		if _, err := s.Apply(uint64(i+1), 1, log[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
