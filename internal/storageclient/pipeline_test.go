package storageclient

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/link"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// silentStorage takes pipeline Range calls and never answers them, recording the timeout each was sent with and
// why its context ended; with ending set, it stops (ending the pipeline as a stopping storage does) once it has
// taken the first call.
type silentStorage struct {
	ending   bool
	stopping chan struct{}
	mu       sync.Mutex
	timeouts map[uint64]time.Duration
	ended    map[uint64]error
	served   []*framed.Conn
	conns    sync.WaitGroup
}

func (s *silentStorage) serve(lis net.Listener) {
	srv := link.NewServer(link.ServerConfig{Name: "silent storage",
		End: status.Error(codes.Unavailable, "cairn storage unavailable: stopping")})
	srv.Handle(storagepb.PipelineRange, func(call *link.Call) {
		if s.ending {
			call.Reply(nil) // answered, so the stop does not wait for it; the next call is never started
			close(s.stopping)
			return
		}
		ctx := call.Context()
		s.mu.Lock()
		s.timeouts[call.ID] = call.Timeout()
		s.mu.Unlock()
		go func() {
			<-ctx.Done()
			s.mu.Lock()
			s.ended[call.ID] = ctx.Err()
			s.mu.Unlock()
		}()
	})
	defer s.conns.Done()
	for {
		nc, err := lis.Accept()
		if err != nil {
			return
		}
		conn, err := framed.Accept(nc, nil, storagepb.PipelinePreamble, 5*time.Second)
		if err != nil {
			continue
		}
		s.mu.Lock()
		s.served = append(s.served, conn)
		s.mu.Unlock()
		s.conns.Go(func() { srv.Serve(conn, s.stopping) })
	}
}

func (s *silentStorage) sent(id uint64) (timeout time.Duration, ended error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timeouts[id], s.ended[id]
}

func listen(t *testing.T, s *silentStorage) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.conns.Add(1)
	go s.serve(listener)
	t.Cleanup(func() {
		_ = listener.Close()
		s.mu.Lock()
		for _, conn := range s.served {
			_ = conn.Close()
		}
		s.mu.Unlock()
		s.conns.Wait()
	})
	return listener.Addr().String()
}

// TestPipelineBoundsUnansweredCalls: a call tells storage its deadline (the pipeline's bound or the caller's
// sooner one) and, left unanswered, ends by then: the caller's deadline with its context error, the bound with
// etcd's timeout a sweep later; either way storage's work on it ends.
func TestPipelineBoundsUnansweredCalls(t *testing.T) {
	storage := &silentStorage{stopping: make(chan struct{}), timeouts: map[uint64]time.Duration{}, ended: map[uint64]error{}}
	addr := listen(t, storage)
	const bound = 100 * time.Millisecond
	p := NewPipeline(addr, bound, nil, nil)
	t.Cleanup(p.Close)

	tests := []struct {
		name        string
		ctxTimeout  time.Duration // 0: no deadline of the caller's
		wantTimeout time.Duration // what storage is told
		wantErr     error
		wantCode    codes.Code
		atMost      time.Duration
	}{
		{"bound", 0, bound, rpctypes.ErrGRPCTimeout, codes.Unavailable, bound + 2*time.Second},
		{"caller's deadline", 50 * time.Millisecond, 50 * time.Millisecond, nil, codes.DeadlineExceeded, time.Second},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.ctxTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctxTimeout)
				defer cancel()
			}
			start := time.Now()
			_, err := p.Range(ctx, &pb.RangeRequest{Key: []byte("k")}, 0)
			took := time.Since(start)
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) || status.Code(err) != tt.wantCode {
				t.Fatalf("got %v, want %v (code %v)", err, tt.wantErr, tt.wantCode)
			}
			if errors.Is(err, link.ErrNotSent) {
				t.Fatalf("%v: a call storage took is marked not sent", err)
			}
			if took > tt.atMost {
				t.Fatalf("answered after %v, want at most %v", took, tt.atMost)
			}
			id := uint64(i + 1)
			if timeout, _ := storage.sent(id); timeout > tt.wantTimeout || timeout < tt.wantTimeout-20*time.Millisecond {
				t.Fatalf("storage was told a timeout of %v, want about %v", timeout, tt.wantTimeout)
			}
			waittest.Until(t, 5*time.Second, 5*time.Millisecond, "storage's work on the call ends", func() bool {
				_, ended := storage.sent(id)
				return ended != nil
			})
		})
	}
}

// TestPipelineEndedByStorage: a storage that ends the pipeline (stopping) fails the calls it did not start with
// its own error, marked not sent.
func TestPipelineEndedByStorage(t *testing.T) {
	addr := listen(t, &silentStorage{ending: true, stopping: make(chan struct{})})
	p := NewPipeline(addr, time.Minute, nil, nil)
	t.Cleanup(p.Close)
	if _, err := p.Range(context.Background(), &pb.RangeRequest{Key: []byte("k")}, 0); err != nil {
		t.Fatalf("the call storage answered before stopping: %v", err)
	}
	_, err := p.Range(context.Background(), &pb.RangeRequest{Key: []byte("k")}, 0)
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "cairn storage unavailable: stopping" ||
		!errors.Is(err, link.ErrNotSent) {
		t.Fatalf("call on an ending pipeline: %v, want storage's Unavailable \"cairn storage unavailable: stopping\", not sent", err)
	}
}
