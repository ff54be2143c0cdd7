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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/pkg/cairnpb/storagepb"
	"github.com/cairn-kv/cairn/pkg/testwait"
)

// silentStorage takes Pipeline calls and never answers them, recording what it was sent.
type silentStorage struct {
	storagepb.UnimplementedStorageServer
	mu        sync.Mutex
	timeouts  map[uint64]time.Duration
	cancelled map[uint64]bool
}

func (s *silentStorage) Pipeline(stream grpc.BidiStreamingServer[storagepb.PipelineRequest, storagepb.PipelineResponse]) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
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
	server := grpc.NewServer()
	storagepb.RegisterStorageServer(server, storage)
	go server.Serve(listener)
	t.Cleanup(server.Stop)
	conn, err := grpc.NewClient(listener.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	const bound = 100 * time.Millisecond
	p := NewPipeline(conn, bound, nil)
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
			testwait.Until(t, 5*time.Second, 10*time.Millisecond, "storage told to cancel the call", func() bool {
				_, cancelled := storage.sent(id)
				return cancelled
			})
		})
	}
}
