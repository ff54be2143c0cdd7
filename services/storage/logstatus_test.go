package storage

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

func TestLogStatusCache(t *testing.T) {
	t0 := time.Unix(1000, 0)
	held := commitlog.Status{Term: 3, Leader: 2, CommitIndex: 10}
	for _, tc := range []struct {
		name    string
		empty   bool
		applied uint64
		at      time.Time
		want    bool
	}{
		{"nothing held", true, 10, t0, false},
		{"same applied index, fresh", false, 10, t0.Add(logStatusMaxAge - time.Millisecond), true},
		{"same applied index, too old", false, 10, t0.Add(logStatusMaxAge), false},
		{"something applied since", false, 11, t0.Add(time.Millisecond), false},
		{"the clock went back", false, 10, t0.Add(-time.Millisecond), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c logStatusCache
			if !tc.empty {
				c.put(held, 10, t0)
			}
			got, ok := c.get(tc.applied, tc.at)
			if ok != tc.want || (ok && got.Term != held.Term) {
				t.Fatalf("get(%d, %v) = %+v, %v; want held: %v", tc.applied, tc.at.Sub(t0), got, ok, tc.want)
			}
		})
	}
}

// askedLog numbers its Status answers in Term, so a caller can tell a reused answer from a new one.
type askedLog struct {
	commitlog.Log
	asked atomic.Uint64
}

func (l *askedLog) Status(ctx context.Context) (commitlog.Status, error) {
	st, err := l.Log.Status(ctx)
	st.Term = l.asked.Add(1)
	return st, err
}

// TestStatusReusesRaftFieldsUntilChange: an idle storage answers Status from the raft fields it last read, and
// asks its member again as soon as something is applied, or once they are logStatusMaxAge old (a lost leader
// shows within that).
func TestStatusReusesRaftFieldsUntilChange(t *testing.T) {
	memlog := newMemlog(t, 1)
	log := &askedLog{Log: memlog}
	m := startMember(t, testConfig(t, 1), log, nil)
	ctx := ctxT(t)
	status := func() *storagepb.StatusResponse {
		t.Helper()
		st, err := m.Storage.Status(ctx)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		return st
	}
	first, again := status(), status()
	if again.RaftTerm != first.RaftTerm {
		t.Fatalf("idle Status asked its member again (answer %d, then %d)", first.RaftTerm, again.RaftTerm)
	}
	put, err := m.client.Put(ctx, &pb.PutRequest{Key: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the put applied", func() bool {
		return m.Storage.currentStore().Position().Revision >= put.Header.Revision
	})
	if after := status(); after.RaftTerm == first.RaftTerm || after.RaftIndex <= first.RaftIndex {
		t.Fatalf("Status after a put reused the raft fields read before it: %+v, before %+v", after, first)
	}
	memlog.SetProposeError(rpctypes.ErrGRPCNoLeader)
	defer memlog.SetProposeError(nil)
	lost := time.Now()
	waittest.Until(t, 5*time.Second, 10*time.Millisecond, "Status to show the lost leader", func() bool {
		return status().Leader == 0
	})
	if took := time.Since(lost); took > logStatusMaxAge+time.Second {
		t.Fatalf("Status showed the lost leader %v after it was lost, want within %v", took, logStatusMaxAge)
	}
}
