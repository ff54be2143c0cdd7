package transport

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"

	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// recorder is the raft side of a transport under test: it records what the transport hands it.
type recorder struct {
	mu          sync.Mutex
	received    []*raftpb.Message
	unreachable map[uint64]int
	snapshots   map[raft.SnapshotStatus]int
	removedIDs  map[uint64]bool
	removed     bool
	// holdApps, when set, makes Process block on MsgApp until it is closed.
	holdApps chan struct{}
}

func newRecorder() *recorder {
	return &recorder{unreachable: map[uint64]int{}, snapshots: map[raft.SnapshotStatus]int{}, removedIDs: map[uint64]bool{}}
}

func (r *recorder) Process(ctx context.Context, m *raftpb.Message) error {
	r.mu.Lock()
	hold := r.holdApps
	r.mu.Unlock()
	if m.GetType() == raftpb.MsgApp && hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.received = append(r.received, m)
	return nil
}

func (r *recorder) IsIDRemoved(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removedIDs[id]
}

func (r *recorder) ReportUnreachable(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreachable[id]++
}

func (r *recorder) ReportSnapshot(_ uint64, s raft.SnapshotStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snapshots[s]++
}

func (r *recorder) ReportRemoved() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = true
}

func (r *recorder) count(typ raftpb.MessageType) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.received {
		if m.GetType() == typ {
			n++
		}
	}
	return n
}

func (r *recorder) check(f func() bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return f()
}

// member is a transport with its own gRPC server on loopback.
type member struct {
	id   uint64
	rec  *recorder
	tr   *Transport
	srv  *grpc.Server
	port *framed.Port
	addr string
}

func startMember(t *testing.T, id, clusterID uint64, addr string, faults *Faults, options ...func(*Config)) *member {
	t.Helper()
	rec := newRecorder()
	cfg := Config{MemberID: id, ClusterID: clusterID, Raft: rec, Faults: faults,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	for _, o := range options {
		o(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(MaxRecvMsgSize))
	tr.Register(srv)
	port := framed.Serve(lis, srv, map[string]func(*framed.Conn){MessagesPreamble: tr.ServeLink}, slog.New(slog.DiscardHandler))
	m := &member{id: id, rec: rec, tr: tr, srv: srv, port: port, addr: lis.Addr().String()}
	t.Cleanup(m.stop)
	return m
}

func (m *member) stop() {
	m.tr.Stop()
	m.srv.Stop()
	_ = m.port.Close()
}

func msg(typ raftpb.MessageType, from, to uint64, payload int) *raftpb.Message {
	m := &raftpb.Message{Type: typ.Enum(), From: new(from), To: new(to), Term: new(uint64(1))}
	if payload > 0 {
		m.Entries = []*raftpb.Entry{{Index: new(uint64(1)), Term: new(uint64(1)), Data: make([]byte, payload)}}
	}
	if typ == raftpb.MsgSnap {
		m.Snapshot = &raftpb.Snapshot{Data: []byte("ref"), Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(5)), Term: new(uint64(1))}}
	}
	return m
}

func pair(t *testing.T, options ...func(*Config)) (a, b *member) {
	a = startMember(t, 1, 7, "127.0.0.1:0", nil, options...)
	b = startMember(t, 2, 7, "127.0.0.1:0", nil)
	if err := a.tr.AddPeer(2, []string{"http://" + b.addr}); err != nil {
		t.Fatal(err)
	}
	if err := b.tr.AddPeer(1, []string{"http://" + a.addr}); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func TestDeliversEveryClass(t *testing.T) {
	a, b := pair(t)
	tests := []struct {
		typ raftpb.MessageType
		n   int
	}{
		{raftpb.MsgHeartbeat, 500},
		{raftpb.MsgApp, 500},
		{raftpb.MsgVote, 3},
		{raftpb.MsgSnap, 1},
	}
	for _, tc := range tests {
		t.Run(tc.typ.String(), func(t *testing.T) {
			var msgs []*raftpb.Message
			for range tc.n {
				msgs = append(msgs, msg(tc.typ, 1, 2, 100))
			}
			a.tr.Send(msgs)
			waittest.Until(t, 10*time.Second, 2*time.Millisecond, tc.typ.String(), func() bool {
				return b.rec.count(tc.typ) == tc.n
			})
		})
	}
	waittest.Until(t, 10*time.Second, 2*time.Millisecond, "snapshot reported finished", func() bool {
		return a.rec.check(func() bool { return a.rec.snapshots[raft.SnapshotFinish] == 1 })
	})
}

func TestHeartbeatsDoNotWaitBehindAppends(t *testing.T) {
	a, b := pair(t)
	hold := make(chan struct{})
	b.rec.check(func() bool { b.rec.holdApps = hold; return true })
	defer close(hold)
	var apps []*raftpb.Message
	for range 8 {
		apps = append(apps, msg(raftpb.MsgApp, 1, 2, 1<<20))
	}
	a.tr.Send(apps)
	a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 0)})
	waittest.Until(t, 10*time.Second, 2*time.Millisecond, "heartbeat while appends are stuck", func() bool {
		return b.rec.count(raftpb.MsgHeartbeat) == 1
	})
	if n := b.rec.count(raftpb.MsgApp); n != 0 {
		t.Fatalf("%d appends processed though raft holds them", n)
	}
}

// commitOnly is an append that only moves the follower's commit index, as raft sends when a commit advances.
func commitOnly(commit uint64) *raftpb.Message {
	m := msg(raftpb.MsgApp, 1, 2, 0)
	m.Commit = new(commit)
	return m
}

func TestCommitOnlyAppendsWaitForTheNextAppend(t *testing.T) {
	const entries = -1 // in arrives: an append with entries
	tests := []struct {
		name string
		hold time.Duration
		// writing: two appends with entries go first (writes are flowing).
		writing bool
		// next, when set, is sent after the commit-only appends; arrives is what b then receives, in order
		// (the commit index of each append, or entries).
		next    *raftpb.Message
		arrives []int64
	}{
		{name: "ride with the next append", hold: time.Hour, writing: true, next: msg(raftpb.MsgApp, 1, 2, 100),
			arrives: []int64{entries, entries, 3, 4, entries}},
		{name: "sent alone when nothing follows", hold: 20 * time.Millisecond, writing: true,
			arrives: []int64{entries, entries, 3, 4}},
		{name: "not held when no write is flowing", hold: time.Hour, arrives: []int64{3, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, func(c *Config) { c.CommitHold = tc.hold })
			if tc.writing {
				a.tr.Send([]*raftpb.Message{msg(raftpb.MsgApp, 1, 2, 100)})
				waittest.Until(t, 10*time.Second, 2*time.Millisecond, "the first append", func() bool {
					return b.rec.count(raftpb.MsgApp) == 1
				})
				a.tr.Send([]*raftpb.Message{msg(raftpb.MsgApp, 1, 2, 100)})
				waittest.Until(t, 10*time.Second, 2*time.Millisecond, "the second append", func() bool {
					return b.rec.count(raftpb.MsgApp) == 2
				})
			}
			a.tr.Send([]*raftpb.Message{commitOnly(3)})
			a.tr.Send([]*raftpb.Message{commitOnly(4)})
			if tc.next != nil {
				a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 0)})
				waittest.Until(t, 10*time.Second, 2*time.Millisecond, "a heartbeat sent after them", func() bool {
					return b.rec.count(raftpb.MsgHeartbeat) == 1
				})
				time.Sleep(50 * time.Millisecond)
				if n := b.rec.count(raftpb.MsgApp); n != 2 {
					t.Fatalf("%d commit-only appends arrived with no append to ride with", n-2)
				}
				a.tr.Send([]*raftpb.Message{tc.next})
			}
			waittest.Until(t, 10*time.Second, 2*time.Millisecond, "the appends", func() bool {
				return b.rec.count(raftpb.MsgApp) == len(tc.arrives)
			})
			var got []int64
			b.rec.check(func() bool {
				for _, m := range b.rec.received {
					switch {
					case m.GetType() != raftpb.MsgApp:
					case len(m.GetEntries()) > 0:
						got = append(got, entries)
					default:
						got = append(got, int64(m.GetCommit()))
					}
				}
				return true
			})
			if !slices.Equal(got, tc.arrives) {
				t.Fatalf("appends arrived as %v, want %v", got, tc.arrives)
			}
		})
	}
}

func TestReconnectsAfterPeerRestart(t *testing.T) {
	a, b := pair(t)
	a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 0)})
	waittest.Until(t, 10*time.Second, 2*time.Millisecond, "first heartbeat", func() bool {
		return b.rec.count(raftpb.MsgHeartbeat) == 1
	})
	if a.tr.ActiveSince(2).IsZero() {
		t.Fatal("ActiveSince is zero on a healthy stream")
	}
	addr := b.addr
	b.stop()
	waittest.Until(t, 10*time.Second, 2*time.Millisecond, "peer reported unreachable", func() bool {
		a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 0)})
		time.Sleep(5 * time.Millisecond)
		return a.rec.check(func() bool { return a.rec.unreachable[2] > 0 }) && a.tr.ActiveSince(2).IsZero()
	})
	b2 := startMember(t, 2, 7, addr, nil)
	waittest.Until(t, 10*time.Second, 2*time.Millisecond, "heartbeat after restart", func() bool {
		a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 0)})
		time.Sleep(5 * time.Millisecond)
		return b2.rec.count(raftpb.MsgHeartbeat) > 0
	})
}

func TestSnapshotToDownPeerIsReportedFailed(t *testing.T) {
	a := startMember(t, 1, 7, "127.0.0.1:0", nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	if err := a.tr.AddPeer(2, []string{"http://" + dead}); err != nil {
		t.Fatal(err)
	}
	a.tr.Send([]*raftpb.Message{msg(raftpb.MsgSnap, 1, 2, 0)})
	waittest.Until(t, 10*time.Second, 2*time.Millisecond, "snapshot failure", func() bool {
		return a.rec.check(func() bool { return a.rec.snapshots[raft.SnapshotFailure] == 1 })
	})
}

func TestRefusals(t *testing.T) {
	t.Run("removed member is told", func(t *testing.T) {
		a, b := pair(t)
		b.rec.check(func() bool { b.rec.removedIDs[1] = true; return true })
		waittest.Until(t, 10*time.Second, 2*time.Millisecond, "removal reported", func() bool {
			a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 0)})
			time.Sleep(5 * time.Millisecond)
			return a.rec.check(func() bool { return a.rec.removed })
		})
		if n := b.rec.count(raftpb.MsgHeartbeat); n != 0 {
			t.Fatalf("%d heartbeats from a removed member were processed", n)
		}
	})
	t.Run("other cluster is refused", func(t *testing.T) {
		a := startMember(t, 1, 7, "127.0.0.1:0", nil)
		b := startMember(t, 2, 8, "127.0.0.1:0", nil)
		if err := a.tr.AddPeer(2, []string{"http://" + b.addr}); err != nil {
			t.Fatal(err)
		}
		waittest.Until(t, 10*time.Second, 2*time.Millisecond, "unreachable", func() bool {
			a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 0)})
			time.Sleep(5 * time.Millisecond)
			return a.rec.check(func() bool { return a.rec.unreachable[2] > 0 })
		})
		if n := b.rec.count(raftpb.MsgHeartbeat); n != 0 {
			t.Fatalf("%d heartbeats from another cluster were processed", n)
		}
	})
}

func TestFaultsDropBothDirections(t *testing.T) {
	faults := NewFaults()
	a := startMember(t, 1, 7, "127.0.0.1:0", faults)
	b := startMember(t, 2, 7, "127.0.0.1:0", nil)
	if err := a.tr.AddPeer(2, []string{"http://" + b.addr}); err != nil {
		t.Fatal(err)
	}
	if err := b.tr.AddPeer(1, []string{"http://" + a.addr}); err != nil {
		t.Fatal(err)
	}
	faults.Block(2)
	for range 20 {
		a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 0)})
		b.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 2, 1, 0)})
	}
	waittest.Until(t, 10*time.Second, 2*time.Millisecond, "all 40 heartbeats dropped", func() bool {
		return faults.Dropped() == 40
	})
	if a.rec.count(raftpb.MsgHeartbeat) != 0 || b.rec.count(raftpb.MsgHeartbeat) != 0 {
		t.Fatalf("blocked heartbeats arrived: a got %d, b got %d", a.rec.count(raftpb.MsgHeartbeat), b.rec.count(raftpb.MsgHeartbeat))
	}
	faults.Unblock(2)
	b.tr.Send([]*raftpb.Message{msg(raftpb.MsgVote, 2, 1, 0)})
	a.tr.Send([]*raftpb.Message{msg(raftpb.MsgVote, 1, 2, 0)})
	waittest.Until(t, 10*time.Second, 2*time.Millisecond, "votes after unblocking", func() bool {
		return a.rec.count(raftpb.MsgVote) == 1 && b.rec.count(raftpb.MsgVote) == 1
	})
}

func TestProberWarnsOfAnUnreachablePeer(t *testing.T) {
	var logs lockedLog
	a := startMember(t, 1, 7, "127.0.0.1:0", nil, func(c *Config) {
		c.ProbeInterval = 20 * time.Millisecond
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	if err := a.tr.AddPeer(2, []string{"http://" + dead}); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the prober's warning", func() bool {
		return strings.Contains(logs.String(), `"level":"WARN","msg":"prober detected unhealthy status","peer":"2","target":"`+dead+`","rtt"`)
	})
	if !strings.Contains(logs.String(), "connection refused") {
		t.Fatalf("the warning does not say why: %s", logs.String())
	}
}

// lockedLog is a log destination written by the transport's goroutines and read by the test.
type lockedLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
