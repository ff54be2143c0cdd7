package frontend

import (
	"context"
	"net"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairn-kv/cairn/internal/authstate"
	"github.com/cairn-kv/cairn/internal/authtoken"
)

// answeringKV answers every Put at once, so a benchmark of the client port measures what the server does around
// a handler: gRPC, the server options and the interceptors.
type answeringKV struct{ pb.UnimplementedKVServer }

func (answeringKV) Put(context.Context, *pb.PutRequest) (*pb.PutResponse, error) {
	return &pb.PutResponse{Header: &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 3, RaftTerm: 4}}, nil
}

// BenchmarkClientPortPut measures one Put through the client port's gRPC server, with the frontend's server
// options and interceptors (auth disabled, tracing off) around a handler that answers at once, from an
// in-process client on loopback. Allocations are the client's and the server's together; the client's do not
// change with the server's options.
//
//	go test -run '^$' -bench ClientPortPut -benchmem ./services/frontend/
func BenchmarkClientPortPut(b *testing.B) {
	tokens, err := authtoken.New("simple", 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	f := &Frontend{cfg: DefaultConfig(), deps: Deps{}.withDefaults()}
	f.tel = f.deps.Telemetry
	f.metrics = newMetrics(f)
	f.auth = newAuthGate(f, tokens)
	st := authstate.New()
	st.Seal()
	f.auth.state.Store(&gateState{State: st})
	server := grpc.NewServer(f.serverOptions(&kvServer{f: f})...)
	pb.RegisterKVServer(server, answeringKV{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- server.Serve(lis) }()
	defer func() {
		server.Stop()
		<-served
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	kv := pb.NewKVClient(conn)
	req := &pb.PutRequest{Key: []byte("bench/key"), Value: make([]byte, 256)}
	ctx := context.Background()
	if _, err := kv.Put(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := kv.Put(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKVPutUntilStorage measures what KV.Put's handler allocates on its way to a storage: the checks, the
// request submitted and its header, with authentication disabled; the pool has no storage, so the call ends
// there (errNoStorage), before the pipeline.
//
//	go test -run '^$' -bench KVPutUntilStorage -benchmem ./services/frontend/
func BenchmarkKVPutUntilStorage(b *testing.B) {
	tokens, err := authtoken.New("simple", 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	f := &Frontend{cfg: DefaultConfig(), deps: Deps{}.withDefaults()}
	f.tel, f.logger = f.deps.Telemetry, f.deps.Logger
	if f.pool, err = newPool(f.cfg, f.tel, f.logger, nil); err != nil {
		b.Fatal(err)
	}
	defer f.pool.close()
	f.metrics = newMetrics(f)
	f.auth = newAuthGate(f, tokens)
	st := authstate.New()
	st.Seal()
	f.auth.state.Store(&gateState{State: st})
	kv := &kvServer{f: f}
	req := &pb.PutRequest{Key: []byte("bench/key"), Value: make([]byte, 256)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := kv.Put(ctx, req); err == nil {
			b.Fatal("a put with no storage succeeded")
		}
	}
}
