package frontend_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/metricstest"
	"github.com/cairn-kv/cairn/internal/wiremsg"
	"github.com/cairn-kv/cairn/services/watchhub"
)

// TestRelayedWatchLagBound: a client that stops reading a relayed stream for longer than the hub's lag bound
// gets, when it reads again, each watch's events in order and without a gap, then one cancel with the lag
// reason, and nothing more for it; every cancel is counted, by the frontend (a response grown late in its
// buffers, after the hub's check) or by the hub (one in its queue), and the stream goes on serving a new
// watch. Which of the two cancels a watch depends on where the backlog stood when the client stopped: when the
// frontend had written out each batch it held but the last response, the hub, waiting for that batch's
// acknowledgment, holds the rest, and cancels every watch itself (TestRelayLagBound checks the frontend's
// cancels response by response).
func TestRelayedWatchLagBound(t *testing.T) {
	const bound = time.Second
	c := clustertest.Start(t, clustertest.Options{Members: 1, Watchhubs: 1,
		ConfigureWatchhub: func(cfg *watchhub.Config) { cfg.MaxWatchLag = bound }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Fixed windows (no BDP estimation), so that a client that does not read holds up the relay at 64 KiB.
	stream := openWatch(ctx, t, c.Endpoints()[0],
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	const watchers, puts = 10, 100
	create := func(id int64, key string) {
		t.Helper()
		if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
			CreateRequest: &pb.WatchCreateRequest{Key: []byte(key), WatchId: id}}}); err != nil {
			t.Fatal(err)
		}
	}
	for id := range int64(watchers) {
		create(id, "k")
	}
	for range watchers {
		if resp, err := stream.Recv(); err != nil || !resp.Created {
			t.Fatalf("created: %v, %v", resp, err)
		}
	}
	cli := c.Client(t)
	var first int64
	for i := range puts { // 2 MiB of responses, far more than the relay's buffers hold
		resp, err := cli.Put(ctx, "k", strings.Repeat(fmt.Sprintf("%08d", i), 256))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = resp.Header.Revision
		}
	}
	time.Sleep(3 * bound) // the client reads nothing meanwhile

	next := make([]int64, watchers) // the revision each watch expects next
	for i := range next {
		next[i] = first
	}
	reason := wiremsg.LagCancelReason(bound)
	canceled := 0
	for canceled < watchers {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d cancels: %v", canceled, err)
		}
		id := resp.WatchId
		if id < 0 || id >= watchers || next[id] < 0 {
			t.Fatalf("response %v for a watch canceled or unknown", resp)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != next[id] {
				t.Fatalf("watch %d: revision %d, want %d", id, ev.Kv.ModRevision, next[id])
			}
			next[id]++
		}
		if resp.Canceled {
			if resp.CancelReason != reason || resp.CompactRevision != 0 {
				t.Fatalf("watch %d canceled with %q (compact %d), want %q", id, resp.CancelReason, resp.CompactRevision, reason)
			}
			if next[id] == first+puts {
				t.Fatalf("watch %d got every put, then a cancel", id)
			}
			next[id] = -1
			canceled++
		}
	}
	// The stream still serves: a new watch's event comes, and nothing more for the canceled ones.
	create(watchers, "other")
	// The put waits for the created response: a put applied before the hub creates the watch is before its
	// start (the created header's revision), and its event is not the watch's.
	if resp, err := stream.Recv(); err != nil || resp.WatchId != watchers || !resp.Created {
		t.Fatalf("after every watch was canceled: %v, %v; want the new watch created", resp, err)
	}
	put, err := cli.Put(ctx, "other", "v")
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.WatchId != watchers {
			t.Fatalf("response %v after every watch was canceled", resp)
		}
		if resp.Canceled {
			t.Fatalf("the new watch was canceled: %v", resp)
		}
		if len(resp.Events) > 0 {
			if rev := resp.Events[0].Kv.ModRevision; rev != put.Header.Revision {
				t.Fatalf("new watch: revision %d, want %d", rev, put.Header.Revision)
			}
			break
		}
	}
	families, err := metricstest.Scrape(c.Endpoints()[0] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	byFrontend, _ := metricstest.Value(families, "cairn_frontend_watchers_lag_canceled_total")
	byHub, _ := metricstest.Value(metricstest.Gather(t, c.Watchhubs()[0].Hub().Registry()),
		"cairn_watchhub_watchers_lag_canceled_total")
	if byFrontend+byHub < watchers { // a watch the frontend canceled may be counted by the hub too
		t.Errorf("lag cancels counted: %v by the frontend, %v by the hub; want at least %d in all", byFrontend, byHub, watchers)
	}
}

// TestRelayedWatchAfterHalfClose: a client that closes its side of a Watch stream after its requests (as etcd's
// HTTP gateway does) goes on getting every event through a frontend, though the frontend, its side closed
// too, can no longer acknowledge the hub's batches.
func TestRelayedWatchAfterHalfClose(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1, Watchhubs: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream := openWatch(ctx, t, c.Endpoints()[0])
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
		CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}}); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || !resp.Created {
		t.Fatalf("created: %v, %v", resp, err)
	}
	cli := c.Client(t)
	const puts = 60 // 240 KiB of responses: many of the hub's 16 KiB batches
	var revs []int64
	for i := range puts {
		resp, err := cli.Put(ctx, "k", strings.Repeat(fmt.Sprintf("%08d", i), 512))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, resp.Header.Revision)
	}
	var got []int64
	for len(got) < puts {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(got), puts, err)
		}
		for _, ev := range resp.Events {
			got = append(got, ev.Kv.ModRevision)
		}
	}
	if !slices.Equal(got, revs) {
		t.Fatalf("events at %v, want %v", got, revs)
	}
}

// openWatch opens a raw Watch stream on endpoint (http://host:port) with dial options opts; its connection
// closes when the test ends.
func openWatch(ctx context.Context, t *testing.T, endpoint string, opts ...grpc.DialOption) pb.Watch_WatchClient {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(endpoint, "http://"),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	stream, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}
