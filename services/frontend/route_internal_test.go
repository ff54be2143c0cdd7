package frontend

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/link"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want failure
		// wantWrite is what a write client gets for err.
		wantWrite error
	}{
		{"etcd no leader", rpctypes.ErrGRPCNoLeader, failedFinal, rpctypes.ErrGRPCNoLeader},
		{"etcd timeout", rpctypes.ErrGRPCTimeout, failedFinal, rpctypes.ErrGRPCTimeout},
		{"etcd bad request", rpctypes.ErrGRPCEmptyKey, failedFinal, rpctypes.ErrGRPCEmptyKey},
		{"dial failure, marked", link.NotSent(status.Error(codes.Unavailable, "link to 127.0.0.1:1: dial: connection refused")),
			failedNotSent, nil},
		{"storage unhealthy before proposing, marked", link.NotSent(status.Error(codes.Unavailable, "cairn storage unavailable: store failed")),
			failedNotSent, nil},
		{"storage unhealthy, mark carried as a status detail", link.FromStatus(status.Convert(
			link.NotSent(status.Error(codes.Unavailable, "cairn storage unavailable: store failed")))), failedNotSent, nil},
		// Text that once meant "not sent" decides nothing: unmarked, it may have been in flight.
		{"gRPC's dial wording, unmarked", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`),
			failedInFlight, rpctypes.ErrGRPCTimeoutDueToConnectionLost},
		{"storage's refusal wording, unmarked", status.Error(codes.Unavailable, "cairn storage unavailable: store failed"),
			failedInFlight, rpctypes.ErrGRPCTimeoutDueToConnectionLost},
		{"connection lost mid-call", status.Error(codes.Unavailable, "error reading from server: EOF"), failedInFlight,
			rpctypes.ErrGRPCTimeoutDueToConnectionLost},
		{"transport closing", status.Error(codes.Unavailable, "transport is closing"), failedInFlight,
			rpctypes.ErrGRPCTimeoutDueToConnectionLost},
		{"proposal stream broke", status.Error(codes.Unavailable, "consensusclient: proposal stream broke: EOF"), failedInFlight,
			rpctypes.ErrGRPCTimeoutDueToConnectionLost},
		{"not a status", errors.New("boom"), failedFinal, errors.New("boom")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.want {
				t.Fatalf("classify = %d, want %d", got, tc.want)
			}
			if tc.want == failedNotSent {
				return // tried on the next replica, never returned as is
			}
			got := writeError(context.Background(), tc.err)
			if got.Error() != tc.wantWrite.Error() {
				t.Fatalf("write error %v, want %v", got, tc.wantWrite)
			}
		})
	}
}

func TestReplyErrorMapsContextEnds(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := replyError(canceled, status.Error(codes.Canceled, "context canceled")); err != rpctypes.ErrGRPCCanceled {
		t.Fatalf("canceled: %v", err)
	}
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	<-expired.Done()
	if err := replyError(expired, status.Error(codes.DeadlineExceeded, "context deadline exceeded")); err != rpctypes.ErrGRPCTimeout {
		t.Fatalf("deadline: %v", err)
	}
}
