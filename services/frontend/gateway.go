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
	"google.golang.org/protobuf/encoding/protojson"
)

// newGateway builds etcd's grpc-gateway JSON API (/v3/...), with etcd's marshalling options, over a gRPC
// connection to this frontend's own client listener; streams (watch, keep-alive) also work over websockets,
// as etcd's do.
func (f *Frontend) newGateway(ctx context.Context) (http.Handler, error) {
	conn, err := grpc.NewClient(loopbackTarget(f.listeners[0].Addr()),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<31-1)))
	if err != nil {
		return nil, fmt.Errorf("gateway connection: %w", err)
	}
	f.gatewayConn = conn
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{
		Marshaler: &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
		},
	}))
	for _, register := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		gw.RegisterKVHandler, gw.RegisterWatchHandler, gw.RegisterLeaseHandler, gw.RegisterClusterHandler,
		gw.RegisterMaintenanceHandler, gw.RegisterAuthHandler,
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

// loopbackTarget is addr as a dial target, with an unspecified host (0.0.0.0, ::) replaced by loopback.
func loopbackTarget(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
