package frontend

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/tmc/grpc-websocket-proxy/wsproxy"
	"go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"

	v3electiongw "github.com/cairn-kv/cairn/api/v3electionpb/gw"
	v3lockgw "github.com/cairn-kv/cairn/api/v3lockpb/gw"
)

// newGateway builds etcd's grpc-gateway JSON API (/v3/...), with etcd's marshalling options, over an
// in-memory gRPC connection to this frontend's own gRPC server (so no port, plain or TLS, is needed for it);
// streams (watch, keep-alive) also work over websockets, as etcd's do.
// gatewayBufferBytes is the buffer of the gateway's in-memory connection, each way.
const gatewayBufferBytes = 1 << 20

func (f *Frontend) newGateway(ctx context.Context) (http.Handler, error) {
	internal := bufconn.Listen(gatewayBufferBytes)
	f.serve("gateway grpc", internal, func() error { return f.grpcServer.Serve(internal) })
	conn, err := grpc.NewClient("passthrough:///cairn-frontend",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return internal.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<31-1)))
	if err != nil {
		return nil, fmt.Errorf("gateway connection: %w", err)
	}
	f.gatewayConn = conn
	f.self.Store(newSelfClient(ctx, conn))
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{
		Marshaler: &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
		},
	}))
	for _, register := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		gw.RegisterKVHandler, gw.RegisterWatchHandler, gw.RegisterLeaseHandler, gw.RegisterClusterHandler,
		gw.RegisterMaintenanceHandler, gw.RegisterAuthHandler, v3lockgw.RegisterLockHandler,
		v3electiongw.RegisterElectionHandler,
	} {
		if err := register(ctx, mux, conn); err != nil {
			return nil, fmt.Errorf("register gateway handler: %w", err)
		}
	}
	return wsproxy.WebsocketProxy(mux,
		wsproxy.WithRequestMutator(func(_ *http.Request, outgoing *http.Request) *http.Request {
			outgoing.Method = http.MethodPost // streams are POSTs to the gateway
			return outgoing
		}),
		wsproxy.WithMaxRespBodyBufferSize(0x7fffffff),
	), nil
}
