package storageclient

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/storagepb"
)

// statusStorage is a storage on loopback that answers Status with its revision, or with err.
type statusStorage struct {
	storagepb.UnimplementedStorageServer
	revision int64
	err      error
	calls    atomic.Int64
}

func (s *statusStorage) Status(context.Context, *storagepb.StatusRequest) (*storagepb.StatusResponse, error) {
	s.calls.Add(1)
	if s.err != nil {
		return nil, s.err
	}
	return &storagepb.StatusResponse{Revision: s.revision}, nil
}

// serveStorages serves each storage on its own loopback port until the test ends and returns their URLs.
func serveStorages(t *testing.T, storages ...*statusStorage) []string {
	t.Helper()
	var urls []string
	for _, s := range storages {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		storagepb.RegisterStorageServer(srv, s)
		served := make(chan struct{})
		go func() { defer close(served); _ = srv.Serve(lis) }()
		t.Cleanup(func() { srv.Stop(); <-served })
		urls = append(urls, "http://"+lis.Addr().String())
	}
	return urls
}

func TestPoolDoFailsOver(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "storage is stopping")
	invalid := status.Error(codes.InvalidArgument, "bad request")
	tests := []struct {
		name          string
		errs          []error // each storage's answer: nil answers with its revision (index+1)
		failsOver     func(context.Context, error) bool
		wantRevision  int64
		wantCode      codes.Code
		wantPreferred int
		wantCalls     []int64
	}{
		{"first answers", []error{nil, nil}, nil, 1, codes.OK, 0, []int64{1, 0}},
		{"first unavailable", []error{unavailable, nil}, nil, 2, codes.OK, 1, []int64{1, 1}},
		{"every storage unavailable", []error{unavailable, unavailable}, nil, 0, codes.Unavailable, 0, []int64{1, 1}},
		{"an error that holds everywhere is not retried", []error{invalid, nil}, nil, 0, codes.InvalidArgument, 0, []int64{1, 0}},
		{"a policy that fails over on any error", []error{invalid, nil},
			func(context.Context, error) bool { return true }, 2, codes.OK, 1, []int64{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var storages []*statusStorage
			for i, err := range tt.errs {
				storages = append(storages, &statusStorage{revision: int64(i + 1), err: err})
			}
			pool, err := NewPool(PoolConfig{Endpoints: serveStorages(t, storages...), FailsOver: tt.failsOver,
				CallTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			var revision int64
			err = pool.Do(context.Background(), func(ctx context.Context, c *Client) error {
				st, err := c.Status(ctx)
				if err == nil {
					revision = st.Revision
				}
				return err
			})
			if got := status.Code(err); got != tt.wantCode || revision != tt.wantRevision {
				t.Fatalf("Do: revision %d, code %v (%v); want %d, %v", revision, got, err, tt.wantRevision, tt.wantCode)
			}
			if got := pool.Preferred(); got != tt.wantPreferred {
				t.Errorf("preferred storage %d, want %d", got, tt.wantPreferred)
			}
			for i, s := range storages {
				if got := s.calls.Load(); got != tt.wantCalls[i] {
					t.Errorf("storage %d called %d times, want %d", i, got, tt.wantCalls[i])
				}
			}
		})
	}
}

func TestPoolStatusesNamesTheSilentStorage(t *testing.T) {
	down := &statusStorage{err: status.Error(codes.Unavailable, "down")}
	urls := serveStorages(t, &statusStorage{revision: 7}, down, &statusStorage{revision: 9})
	pool, err := NewPool(PoolConfig{Endpoints: urls, CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	answered, err := pool.Statuses(context.Background())
	var indexes []int
	for _, a := range answered {
		indexes = append(indexes, a.Index)
		if a.Endpoint != urls[a.Index] {
			t.Errorf("answer %d names %s, want %s", a.Index, a.Endpoint, urls[a.Index])
		}
	}
	if !slices.Equal(indexes, []int{0, 2}) || answered[1].Status.Revision != 9 {
		t.Fatalf("answered %v (%+v), want storages 0 and 2", indexes, answered)
	}
	if err == nil || !strings.Contains(err.Error(), urls[1]) || !strings.Contains(err.Error(), "down") {
		t.Fatalf("err = %v, want the silent storage %s named", err, urls[1])
	}
}

func TestNewPoolWithoutEndpoints(t *testing.T) {
	if _, err := NewPool(PoolConfig{}); !errors.Is(err, ErrNoEndpoints) {
		t.Fatalf("NewPool() = %v, want ErrNoEndpoints", err)
	}
}
