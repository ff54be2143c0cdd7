package storage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/link"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

func dialPipeline(t testing.TB, m *testMember) *storageclient.Pipeline {
	t.Helper()
	p := storageclient.NewPipeline(m.listener.Addr().String(), time.Minute, nil, nil)
	t.Cleanup(p.Close)
	return p
}

// TestPipelineAnswersAsUnary: every call on the pipeline gets what the unary RPC gives, errors included.
func TestPipelineAnswersAsUnary(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	p := dialPipeline(t, m)
	ctx := ctxT(t)
	put, err := p.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("1"), PrevKv: true}})
	if err != nil || put.GetPut().GetHeader().GetRevision() != 2 {
		t.Fatalf("put over the pipeline: %v, %v; want revision 2", put, err)
	}
	big := make([]byte, 4096)
	for i := range 64 { // 256 KiB: an answer that arrives in many gRPC frames
		big[0] = byte(i)
		if _, err := p.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: fmt.Appendf(nil, "big/%02d", i), Value: big}}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		req  *pb.RangeRequest
	}{
		{"key", &pb.RangeRequest{Key: []byte("a")}},
		{"serializable prefix", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("b"), Serializable: true}},
		{"future revision", &pb.RangeRequest{Key: []byte("a"), Revision: 100}},
		{"count only", &pb.RangeRequest{Key: []byte("a"), CountOnly: true}},
		{"missing key", &pb.RangeRequest{Key: []byte("nothing")}},
		{"large prefix", &pb.RangeRequest{Key: []byte("big/"), RangeEnd: []byte("big0")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr := m.client.Range(ctx, tt.req)
			got, gotErr := p.Range(ctx, tt.req, 0)
			if status.Code(gotErr) != status.Code(wantErr) || status.Convert(gotErr).Message() != status.Convert(wantErr).Message() {
				t.Fatalf("error %v, want %v", gotErr, wantErr)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("answer %v, want %v", got, want)
			}
			encoded, encErr := p.RangeEncoded(ctx, tt.req, 0)
			if status.Code(encErr) != status.Code(wantErr) || status.Convert(encErr).Message() != status.Convert(wantErr).Message() {
				t.Fatalf("encoded: error %v, want %v", encErr, wantErr)
			}
			if wantErr != nil {
				return
			}
			var decoded pb.RangeResponse
			err := proto.Unmarshal(encoded.Materialize(), &decoded)
			encoded.Free()
			if err != nil || !proto.Equal(&decoded, want) {
				t.Fatalf("encoded answer decodes to %v (%v), want %v", &decoded, err, want)
			}
		})
	}
	if _, err := p.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{}}); err.Error() != rpctypes.ErrGRPCEmptyKey.Error() {
		t.Fatalf("empty key over the pipeline: %v, want %v", err, rpctypes.ErrGRPCEmptyKey)
	}
}

// TestPipelineConcurrentCalls: many callers share the pipeline's streams; each gets its own answer, while the
// pipeline starts workers for the calls in flight and reuses them.
func TestPipelineConcurrentCalls(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	p := dialPipeline(t, m)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	const callers = 256
	errs := make(chan error, callers)
	for w := range callers {
		wg.Go(func() {
			for i := range 10 {
				key := fmt.Sprintf("w%d/%d", w, i)
				put, err := p.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(key), Value: []byte(key)}})
				if err != nil {
					errs <- err
					return
				}
				got, err := p.Range(ctx, &pb.RangeRequest{Key: []byte(key)}, 0)
				if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != key ||
					got.Kvs[0].ModRevision != put.GetPut().Header.Revision {
					errs <- fmt.Errorf("read %s after its put at %d: %v, %v", key, put.GetPut().Header.Revision, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestPipelineDeadlinesAndBrokenStreams: a call past its deadline fails as a unary call would, and calls on
// a storage that went away fail with Unavailable instead of hanging.
func TestPipelineDeadlinesAndBrokenStreams(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	p := dialPipeline(t, m)
	expired, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-expired.Done()
	if _, err := p.Range(expired, &pb.RangeRequest{Key: []byte("a")}, 0); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("expired call: %v, want DeadlineExceeded", err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Range(canceled, &pb.RangeRequest{Key: []byte("a")}, 0); status.Code(err) != codes.Canceled {
		t.Fatalf("canceled call: %v, want Canceled", err)
	}
	ctx := ctxT(t)
	// Calls go round the pipeline's lanes (a few connections, dialled ahead): a call on each makes storage serve
	// every lane before it stops, so each gets the end frame. A lane still in cmux's hands at the stop is closed
	// bare, and a call on it then ends in EOF, which the link cannot tell from a call carried out.
	for range 8 { // more than the pipeline has lanes
		if _, err := p.Range(ctx, &pb.RangeRequest{Key: []byte("a")}, 0); err != nil {
			t.Fatal(err)
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	callCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.Range(callCtx, &pb.RangeRequest{Key: []byte("a")}, 0)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("call on a stopped storage: %v, want Unavailable", err)
	}
	if !errors.Is(err, link.ErrNotSent) {
		// A refused dial is certainly not sent. The mark can be missing only if another process's listener took
		// the freed port meanwhile (tests run in parallel) and took the call: then the link cannot know.
		if c, dialErr := net.DialTimeout("tcp", m.listener.Addr().String(), time.Second); dialErr == nil {
			_ = c.Close()
			t.Logf("the stopped storage's port was taken by another listener; not-sent mark not checked: %v", err)
			return
		}
		t.Fatalf("call on a stopped storage: %v, want it marked not sent", err)
	}
}

// TestPipelineAuthFence: a read a frontend checked against an older auth store than storage's (a lower read
// fence) is refused with ErrAuthOldRevision once it has passed its barrier; at the store's fence, or unchecked
// (0), it is answered.
func TestPipelineAuthFence(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	p := dialPipeline(t, m)
	ctx := ctxT(t)
	storeFence := m.currentStore().AuthReadFence() // a fresh store: revision 1, disabled
	readTxn := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{
		RequestRange: &pb.RangeRequest{Key: []byte("a")}}}}}
	for _, tt := range []struct {
		name    string
		fence   uint64
		wantErr error
	}{
		{"unchecked", 0, nil},
		{"checked at the store's fence", storeFence, nil},
		{"checked at a newer fence", storeFence + 1, nil},
		{"checked at an older fence", storeFence - 1, rpctypes.ErrGRPCAuthOldRevision},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, serializable := range []bool{false, true} {
				_, err := p.Range(ctx, &pb.RangeRequest{Key: []byte("a"), Serializable: serializable}, tt.fence)
				if !errors.Is(err, tt.wantErr) && !(tt.wantErr == nil && err == nil) {
					t.Fatalf("range (serializable %v): %v, want %v", serializable, err, tt.wantErr)
				}
			}
			req := &pb.InternalRaftRequest{Txn: readTxn}
			if tt.fence != 0 {
				req.Header = &pb.RequestHeader{AuthRevision: tt.fence}
			}
			if _, err := p.Submit(ctx, req); !errors.Is(err, tt.wantErr) && !(tt.wantErr == nil && err == nil) {
				t.Fatalf("read-only txn: %v, want %v", err, tt.wantErr)
			}
		})
	}
}
