package storage

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/commitlog/commitlogtest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// heldLog is a log that takes every proposal and commits none, so writes wait for their apply until their
// deadline.
type heldLog struct{ *commitlogtest.Log }

func (heldLog) Propose(ctx context.Context, _ []byte) error { return ctx.Err() }

// heldAsyncLog is heldLog that acknowledges proposals without being waited for (commitlog.AsyncProposer), from
// a goroutine of its own, as a remote log does.
type heldAsyncLog struct{ heldLog }

func (heldAsyncLog) ProposeThen(ctx context.Context, _ []byte, done func(error)) {
	go done(ctx.Err())
}

// goroutinesIn counts the goroutines whose stack holds frame.
func goroutinesIn(frame string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), frame)
		}
		buf = make([]byte, 2*len(buf))
	}
}

func (s *Storage) waiting() int {
	s.waiters.mu.Lock()
	defer s.waiters.mu.Unlock()
	return len(s.waiters.m)
}

// TestPipelineWritesAnsweredFromApply: the writes the apply loop answers get the answer Submit gives (revision,
// prev_kv, a txn's results), a refused proposal its error, and a write never applied its deadline; no waiter
// is left behind.
func TestPipelineWritesAnsweredFromApply(t *testing.T) {
	log := newMemlog(t, 1)
	m := startMember(t, testConfig(t, 1), log, nil)
	p := dialPipeline(t, m)
	ctx := ctxT(t)
	if _, err := p.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		req   *pb.InternalRaftRequest
		check func(resp *storagepb.SubmitResponse) error
	}{
		{"put with prev_kv", &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("2"), PrevKv: true}},
			func(r *storagepb.SubmitResponse) error {
				put := r.GetPut()
				if put.GetHeader().GetRevision() != 3 || string(put.GetPrevKv().GetValue()) != "1" {
					return fmt.Errorf("revision %d, prev %q; want 3, \"1\"", put.GetHeader().GetRevision(), put.GetPrevKv().GetValue())
				}
				return nil
			}},
		{"delete with prev_kvs", &pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), PrevKv: true}},
			func(r *storagepb.SubmitResponse) error {
				del := r.GetDeleteRange()
				if del.GetDeleted() != 1 || len(del.GetPrevKvs()) != 1 || del.GetHeader().GetRevision() != 4 {
					return fmt.Errorf("deleted %d, prev %v, revision %d; want 1, one, 4", del.GetDeleted(), del.GetPrevKvs(), del.GetHeader().GetRevision())
				}
				return nil
			}},
		{"txn that writes", &pb.InternalRaftRequest{Txn: &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("a"), Value: []byte("3")}}}}}},
			func(r *storagepb.SubmitResponse) error {
				txn := r.GetTxn()
				if !txn.GetSucceeded() || len(txn.GetResponses()) != 1 || txn.GetHeader().GetRevision() != 5 {
					return fmt.Errorf("txn %v; want it to succeed at revision 5", txn)
				}
				return nil
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !m.answersFromApply(tt.req) {
				t.Fatal("not answered from the apply path")
			}
			resp, err := p.Submit(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.check(resp); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("refused proposal", func(t *testing.T) {
		log.SetProposeError(status.Error(codes.Unavailable, "no leader"))
		defer log.SetProposeError(nil)
		_, err := p.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("b"), Value: []byte("1")}})
		if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "no leader" {
			t.Fatalf("put on a log that refuses: %v, want Unavailable \"no leader\"", err)
		}
	})
	if n := m.waiting(); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
}

// TestPipelineWritesParkNoGoroutine: writes waiting for their apply hold no goroutine on storage (none in
// propose, no link worker of their own), whether the log is waited for or not, and each ends with its deadline
// when it is never applied.
func TestPipelineWritesParkNoGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  func(t *testing.T) commitlog.Log
	}{
		{"log waited for", func(t *testing.T) commitlog.Log { return heldLog{newMemlog(t, 1)} }},
		{"log not waited for", func(t *testing.T) commitlog.Log { return heldAsyncLog{heldLog{newMemlog(t, 1)}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMember(t, testConfig(t, 1), tc.log(t), nil)
			p := dialPipeline(t, m)
			const writes = 200
			var wg sync.WaitGroup
			errs := make(chan error, writes)
			for i := range writes {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					defer cancel()
					_, err := p.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}})
					errs <- err
				})
			}
			waittest.Until(t, 3*time.Second, 5*time.Millisecond, "every write waiting for its apply", func() bool {
				return m.waiting() == writes
			})
			if parked := goroutinesIn("services/storage.(*Storage).propose("); parked != 0 {
				t.Errorf("%d goroutines wait in propose while %d writes wait for their apply, want none", parked, writes)
			}
			if workers := goroutinesIn("internal/link.(*session).newWorker("); workers != 0 {
				t.Errorf("%d link workers kept for %d writes that wait for their apply, want none", workers, writes)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				// storage's deadline (the caller's, sent with the call) or the caller's own, whichever ends first
				if err == nil || (err.Error() != rpctypes.ErrGRPCTimeout.Error() && status.Code(err) != codes.DeadlineExceeded) {
					t.Fatalf("a write never applied: %v, want %v or DeadlineExceeded", err, rpctypes.ErrGRPCTimeout)
				}
			}
			waittest.Until(t, 3*time.Second, 5*time.Millisecond, "no waiter left", func() bool { return m.waiting() == 0 })
		})
	}
}
