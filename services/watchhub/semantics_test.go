package watchhub

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tools/etcdref"
)

const goldenPath = "testdata/etcd-watch-golden.json"

// golden maps "case/step" to the responses each stream received after that step.
type golden map[string]map[int][]string

// semTarget is what a semantics case runs against: somewhere to write, somewhere to watch, and a way to wait
// until a write is visible to watches.
type semTarget struct {
	write    func(ctx context.Context, req *pb.InternalRaftRequest) (int64, error)
	conn     *grpc.ClientConn
	caughtUp func(req *pb.InternalRaftRequest, rev int64) bool
}

// TestSemanticsMatchEtcd replays every semantics case against a hub and compares each response with what real
// etcd v3.7.3 answered (testdata/etcd-watch-golden.json). CAIRN_ETCD_BIN=/path/to/etcd records the golden
// file again.
func TestSemanticsMatchEtcd(t *testing.T) {
	if bin := os.Getenv("CAIRN_ETCD_BIN"); bin != "" {
		recordGolden(t, bin)
	}
	data, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	var want golden
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	// The same responses whether a watch from the past reads the hub's window or storage history (a window of
	// two revisions, history pages of three events).
	hubs := []struct {
		name string
		cfg  Config
	}{
		{"window", Config{}},
		{"history", Config{WindowRevisions: 2, HistoryPageSize: 3}},
	}
	for _, hub := range hubs {
		for _, tc := range semanticsCases {
			t.Run(hub.name+"/"+tc.name, func(t *testing.T) { replayCase(t, tc, hub.cfg, want) })
		}
	}
}

// replayCase replays tc against a hub with cfg and compares each step's responses with want.
func replayCase(t *testing.T, tc semCase, cfg Config, want golden) {
	env := newTestEnv(t, 1)
	h := env.startHub(cfg)
	target := semTarget{
		write: func(ctx context.Context, req *pb.InternalRaftRequest) (int64, error) {
			return writeStorage(ctx, env, req)
		},
		conn: dialHub(t, h.Addr()),
		caughtUp: func(req *pb.InternalRaftRequest, rev int64) bool {
			h.mu.RLock()
			defer h.mu.RUnlock()
			return h.win.head >= rev && h.compactRev >= req.GetCompaction().GetRevision()
		},
	}
	runCase(t, tc, target, func(step string, stream int) int { return len(want[step][stream]) },
		func(step string, stream int, got []string) {
			if w := want[step][stream]; !reflect.DeepEqual(byWatchID(got), byWatchID(w)) {
				t.Errorf("%s stream %d:\n got  %s\n want %s", step, stream, strings.Join(got, "\n      "),
					strings.Join(w, "\n      "))
			}
		})
}

func writeStorage(ctx context.Context, env *testEnv, req *pb.InternalRaftRequest) (int64, error) {
	resp, err := env.client().Submit(ctx, req)
	if err != nil {
		return 0, err
	}
	switch {
	case resp.GetPut() != nil:
		return resp.GetPut().Header.Revision, nil
	case resp.GetDeleteRange() != nil:
		return resp.GetDeleteRange().Header.Revision, nil
	case resp.GetTxn() != nil:
		return resp.GetTxn().Header.Revision, nil
	}
	return resp.GetCompaction().Header.Revision, nil
}

// runCase runs tc on target. After each step it collects each stream's responses: expect says how many to
// wait for (-1: collect for a settling time, when recording), report gets them.
func runCase(t *testing.T, tc semCase, target semTarget, expect func(step string, stream int) int,
	report func(step string, stream int, got []string)) {
	streams := map[int]*rawStream{}
	for _, s := range tc.steps {
		if s.watch != nil && streams[s.stream] == nil {
			streams[s.stream] = openRaw(t, target.conn)
		}
	}
	ctx := ctxT(t)
	for i, s := range tc.steps {
		step := fmt.Sprintf("%s/%d", tc.name, i)
		if s.write != nil {
			rev, err := target.write(ctx, s.write)
			if err != nil {
				t.Fatalf("%s: write: %v", step, err)
			}
			waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the write's revision at the hub", func() bool {
				return target.caughtUp(s.write, rev)
			})
		} else {
			streams[s.stream].send(s.watch)
		}
		for id := 0; id < len(streams); id++ {
			report(step, id, collect(t, streams[id], expect(step, id)))
		}
	}
	for id, rs := range streams {
		rs.noneWithin(t, 200*time.Millisecond, fmt.Sprintf("%s: stream %d after the last step", tc.name, id))
	}
}

// collect gathers n responses (or, with n < 0, whatever arrives within a settling time).
func collect(t *testing.T, rs *rawStream, n int) []string {
	var got []string
	settle := time.After(500 * time.Millisecond)
	deadline := time.After(10 * time.Second)
	for n < 0 || len(got) < n {
		select {
		case resp, ok := <-rs.resps:
			if !ok {
				t.Fatalf("stream ended: %v", rs.err)
			}
			got = append(got, summarize(resp))
		case <-settle:
			if n < 0 {
				return got
			}
		case <-deadline:
			t.Fatalf("got %d responses, want %d: %v", len(got), n, got)
		}
	}
	return got
}

func (rs *rawStream) noneWithin(t *testing.T, d time.Duration, what string) {
	select {
	case resp, ok := <-rs.resps:
		if ok {
			t.Errorf("%s: unexpected response %s", what, summarize(resp))
		}
	case <-time.After(d):
	}
}

// byWatchID orders responses by watch ID, keeping each watch's own order: etcd writes the responses of
// different watches of one revision in no particular order.
func byWatchID(resps []string) []string {
	sorted := slices.Clone(resps)
	id := func(s string) string { return strings.Fields(s)[1] }
	slices.SortStableFunc(sorted, func(a, b string) int { return strings.Compare(id(a), id(b)) })
	return sorted
}

// summarize renders a response without what differs between clusters (cluster, member, term) and with
// long values as their length and hash.
func summarize(r *pb.WatchResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rev=%d id=%d", r.Header.GetRevision(), r.WatchId)
	for _, f := range []struct {
		set  bool
		name string
	}{{r.Created, "created"}, {r.Canceled, "canceled"}, {r.Fragment, "fragment"}} {
		if f.set {
			b.WriteString(" " + f.name)
		}
	}
	if r.CompactRevision != 0 {
		fmt.Fprintf(&b, " compact=%d", r.CompactRevision)
	}
	if r.CancelReason != "" {
		fmt.Fprintf(&b, " reason=%q", r.CancelReason)
	}
	for _, ev := range r.Events {
		fmt.Fprintf(&b, " [%s %s", ev.Type, summarizeKV(ev.Kv))
		if ev.PrevKv != nil {
			fmt.Fprintf(&b, " prev=%s", summarizeKV(ev.PrevKv))
		}
		b.WriteString("]")
	}
	return b.String()
}

func summarizeKV(kv *mvccpb.KeyValue) string {
	value := fmt.Sprintf("%q", kv.Value)
	if len(kv.Value) > 32 {
		value = fmt.Sprintf("len%d:%x", len(kv.Value), sha256.Sum256(kv.Value))[:24]
	}
	return fmt.Sprintf("%q c%d m%d v%d l%d=%s", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, value)
}

// recordGolden runs every case against a fresh real etcd and writes what it answered to goldenPath.
func recordGolden(t *testing.T, bin string) {
	out := golden{}
	for _, tc := range semanticsCases {
		conn, kv, stop := startEtcd(t, bin)
		target := semTarget{
			write: func(ctx context.Context, req *pb.InternalRaftRequest) (int64, error) {
				return writeEtcd(ctx, kv, req)
			},
			conn:     conn,
			caughtUp: func(*pb.InternalRaftRequest, int64) bool { return true },
		}
		runCase(t, tc, target, func(string, int) int { return -1 }, func(step string, stream int, got []string) {
			if len(got) == 0 {
				return
			}
			if out[step] == nil {
				out[step] = map[int][]string{}
			}
			out[step][stream] = got
		})
		stop()
	}
	data, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(goldenPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goldenPath, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeEtcd(ctx context.Context, kv pb.KVClient, req *pb.InternalRaftRequest) (int64, error) {
	switch {
	case req.Put != nil:
		resp, err := kv.Put(ctx, req.Put)
		return resp.GetHeader().GetRevision(), err
	case req.DeleteRange != nil:
		resp, err := kv.DeleteRange(ctx, req.DeleteRange)
		return resp.GetHeader().GetRevision(), err
	case req.Txn != nil:
		resp, err := kv.Txn(ctx, req.Txn)
		return resp.GetHeader().GetRevision(), err
	}
	resp, err := kv.Compact(ctx, req.Compaction)
	return resp.GetHeader().GetRevision(), err
}

// startEtcd starts a single-member reference etcd (internal/tools/etcdref) with a fresh data dir.
func startEtcd(t *testing.T, bin string) (*grpc.ClientConn, pb.KVClient, func()) {
	cluster, err := etcdref.New(etcdref.Config{Members: 1, Binaries: etcdref.Binaries{Etcd: bin},
		Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(cluster.Endpoints()[0], "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	return conn, pb.NewKVClient(conn), func() {
		_ = conn.Close()
		_ = cluster.Stop(context.Background())
	}
}
