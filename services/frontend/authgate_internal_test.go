package frontend

import (
	"context"
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-kv/cairn/internal/authstate"
	"github.com/cairn-kv/cairn/internal/authtoken"
)

// BenchmarkAuthInterceptorOff is the unary interceptor's own cost with authentication disabled: what every
// request pays before its handler when auth is off.
func BenchmarkAuthInterceptorOff(b *testing.B) {
	tokens, err := authtoken.New("simple", 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	g := newAuthGate(&Frontend{}, tokens)
	st := authstate.New()
	st.Seal()
	g.state.Store(&gateState{State: st})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("user-agent", "bench"))
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, req := range []any{&pb.PutRequest{Key: []byte("k")}, &pb.RangeRequest{Key: []byte("k")}} {
		b.Run(strings.TrimPrefix(fmt.Sprintf("%T", req), "*etcdserverpb."), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.unaryInterceptor(ctx, req, &grpc.UnaryServerInfo{}, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
