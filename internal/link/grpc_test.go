package link

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthService answers Check by the service name asked: "refuse" as an unhealthy storage refuses (not sent),
// "block" once released or its context ends, anything else serving.
type healthService struct {
	healthpb.UnimplementedHealthServer
	started chan struct{}
}

func (h *healthService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch req.Service {
	case "refuse":
		return nil, NotSent(status.Error(codes.Unavailable, "cairn storage unavailable: store failed"))
	case "block":
		h.started <- struct{}{}
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func startGRPC(t *testing.T) (addr string, h *healthService, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	h = &healthService{started: make(chan struct{}, 4)}
	healthpb.RegisterHealthServer(s, h)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String(), h, s.Stop
}

func dialGRPC(t *testing.T, addr string) healthpb.HealthClient {
	t.Helper()
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, GRPCDialOptions()...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestNotSentMarkingOnGRPC covers the same paths as TestNotSentMarking on a gRPC call.
func TestNotSentMarkingOnGRPC(t *testing.T) {
	for _, tc := range []struct {
		name        string
		run         func(t *testing.T) error
		wantNotSent bool
		code        codes.Code
	}{
		{"dial failure", func(t *testing.T) error {
			lis, _ := net.Listen("tcp", "127.0.0.1:0")
			addr := lis.Addr().String()
			_ = lis.Close()
			_, err := dialGRPC(t, addr).Check(context.Background(), &healthpb.HealthCheckRequest{})
			return err
		}, true, codes.Unavailable},
		{"health refusal", func(t *testing.T) error {
			addr, _, _ := startGRPC(t)
			_, err := dialGRPC(t, addr).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "refuse"})
			if st := status.Convert(err); st.Message() != "cairn storage unavailable: store failed" {
				t.Errorf("message %q changed", st.Message())
			}
			return err
		}, true, codes.Unavailable},
		{"broke after send", func(t *testing.T) error {
			addr, h, stop := startGRPC(t)
			done := make(chan error, 1)
			go func() {
				_, err := dialGRPC(t, addr).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "block"})
				done <- err
			}()
			<-h.started
			stop()
			return <-done
		}, false, codes.Unavailable},
		{"deadline", func(t *testing.T) error {
			addr, _, _ := startGRPC(t)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := dialGRPC(t, addr).Check(ctx, &healthpb.HealthCheckRequest{Service: "block"})
			return err
		}, false, codes.DeadlineExceeded},
		{"cancel", func(t *testing.T) error {
			addr, h, _ := startGRPC(t)
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-h.started; cancel() }()
			_, err := dialGRPC(t, addr).Check(ctx, &healthpb.HealthCheckRequest{Service: "block"})
			return err
		}, false, codes.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run(t)
			if err == nil {
				t.Fatal("the call succeeded")
			}
			if got := errors.Is(err, ErrNotSent); got != tc.wantNotSent {
				t.Fatalf("errors.Is(%v, ErrNotSent) = %v, want %v", err, got, tc.wantNotSent)
			}
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, err, tc.code)
			}
		})
	}
}

// markedHealth answers every health call with a not-sent error, as a handler deep in a server might.
type markedHealth struct {
	healthpb.UnimplementedHealthServer
}

func (markedHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return nil, NotSent(status.Error(codes.Unavailable, "unit check"))
}

func (markedHealth) Watch(*healthpb.HealthCheckRequest, healthpb.Health_WatchServer) error {
	return NotSent(status.Error(codes.Unavailable, "unit watch"))
}

// TestPlainServerOptionsStripTheMark: a server built with PlainServerOptions answers a marked error, on a
// unary call and on a stream, with the same code and message and no not-sent detail.
func TestPlainServerOptionsStripTheMark(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plain bool
	}{{"plain server", true}, {"internal server", false}} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var opts []grpc.ServerOption
			if tc.plain {
				opts = PlainServerOptions()
			}
			srv := grpc.NewServer(opts...)
			healthpb.RegisterHealthServer(srv, markedHealth{})
			go func() { _ = srv.Serve(lis) }()
			t.Cleanup(srv.Stop)
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cc.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			client := healthpb.NewHealthClient(cc)
			_, unaryErr := client.Check(ctx, &healthpb.HealthCheckRequest{})
			stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			_, streamErr := stream.Recv()
			for _, got := range []struct {
				err     error
				message string
			}{{unaryErr, "unit check"}, {streamErr, "unit watch"}} {
				st := status.Convert(got.err)
				if st.Code() != codes.Unavailable || st.Message() != got.message {
					t.Fatalf("error = %v, want Unavailable %q", got.err, got.message)
				}
				if marked := hasNotSentDetail(st); marked == tc.plain {
					t.Fatalf("%v: not-sent detail present = %v, want %v", got.err, marked, !tc.plain)
				}
			}
		})
	}
}
