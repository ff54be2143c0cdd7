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
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// silentStorage takes pipeline calls and never answers them, recording what it was sent; with ending set, it
// answers the first call by ending the pipeline as a stopping storage does.
type silentStorage struct {
	ending    bool
	mu        sync.Mutex
	timeouts  map[uint64]time.Duration
	cancelled map[uint64]bool
}

func (s *silentStorage) serve(lis net.Listener) {
	for {
		nc, err := lis.Accept()
		if err != nil {
			return
		}
		conn, err := framed.Accept(nc, nil, PipelinePreamble, 5*time.Second)
		if err != nil {
			continue
		}
		go s.pipeline(conn)
	}
}

func (s *silentStorage) pipeline(conn *framed.Conn) {
	for {
		frame, err := conn.Receive()
		if err != nil {
			return
		}
		req := &storagepb.PipelineRequest{}
		if err := proto.Unmarshal(frame, req); err != nil {
			return
		}
		if s.ending {
			end, _ := proto.Marshal(&storagepb.PipelineResponse{Result: &storagepb.PipelineResponse_Error{
				Error: status.New(codes.Unavailable, "cairn storage unavailable: stopping").Proto()}})
			_ = conn.Send(nil, end)
			_ = conn.Close()
			return
		}
		s.mu.Lock()
		if req.GetCancel() {
			s.cancelled[req.Id] = true
		} else {
			s.timeouts[req.Id] = time.Duration(req.TimeoutMicros) * time.Microsecond
		}
		s.mu.Unlock()
	}
}

func (s *silentStorage) sent(id uint64) (timeout time.Duration, cancelled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timeouts[id], s.cancelled[id]
}

// TestPipelineBoundsUnansweredCalls: a call tells storage its deadline (the pipeline's bound or the caller's
// sooner one) and, left unanswered, ends by then: the caller's deadline with its context error, the bound with
// etcd's timeout a sweep later; either way storage is told to cancel it.
func TestPipelineBoundsUnansweredCalls(t *testing.T) {
	storage := &silentStorage{timeouts: map[uint64]time.Duration{}, cancelled: map[uint64]bool{}}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close() })
	go storage.serve(listener)
	const bound = 100 * time.Millisecond
	p := NewPipeline(listener.Addr().String(), bound, nil)
	t.Cleanup(p.Close)

	tests := []struct {
		name        string
		ctxTimeout  time.Duration // 0: no deadline of the caller's
		wantTimeout time.Duration // what storage is told
		wantErr     error
		wantCode    codes.Code
		atMost      time.Duration
	}{
		{"bound", 0, bound, rpctypes.ErrGRPCTimeout, codes.Unavailable, bound + sweepGrace + 2*sweepInterval + time.Second},
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
			_, err := p.Range(ctx, &pb.RangeRequest{Key: []byte("k")})
			took := time.Since(start)
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) || status.Code(err) != tt.wantCode {
				t.Fatalf("got %v, want %v (code %v)", err, tt.wantErr, tt.wantCode)
			}
			if took > tt.atMost {
				t.Fatalf("answered after %v, want at most %v", took, tt.atMost)
			}
			id := uint64(i + 1)
			if timeout, _ := storage.sent(id); timeout > tt.wantTimeout || timeout < tt.wantTimeout-20*time.Millisecond {
				t.Fatalf("storage was told a timeout of %v, want about %v", timeout, tt.wantTimeout)
			}
			waittest.Until(t, 5*time.Second, 10*time.Millisecond, "storage told to cancel the call", func() bool {
				_, cancelled := storage.sent(id)
				return cancelled
			})
		})
	}
}

// TestPipelineEndedByStorage: a storage that ends the pipeline (stopping) fails the calls it did not answer with
// its own error, which says they were not started.
func TestPipelineEndedByStorage(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close() })
	go (&silentStorage{ending: true}).serve(listener)
	p := NewPipeline(listener.Addr().String(), time.Minute, nil)
	t.Cleanup(p.Close)
	_, err = p.Range(context.Background(), &pb.RangeRequest{Key: []byte("k")})
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "cairn storage unavailable: stopping" {
		t.Fatalf("call on an ending pipeline: %v, want storage's Unavailable \"cairn storage unavailable: stopping\"", err)
	}
}
