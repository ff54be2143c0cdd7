package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
)

// scriptedStream is a watch stream whose Recv returns resps in turn, then io.EOF.
type scriptedStream struct {
	pb.Watch_WatchClient
	resps []*pb.WatchResponse
}

func (s *scriptedStream) Recv() (*pb.WatchResponse, error) {
	if len(s.resps) == 0 {
		return nil, io.EOF
	}
	resp := s.resps[0]
	s.resps = s.resps[1:]
	return resp, nil
}

func created(id int64) *pb.WatchResponse { return &pb.WatchResponse{WatchId: id, Created: true} }

func canceled(id int64) *pb.WatchResponse {
	return &pb.WatchResponse{WatchId: id, Canceled: true, CancelReason: "watcher fell more than 5s behind the head"}
}

// events is a response of n events for watch id, stamped as the benchmark's puts are.
func events(id int64, n int) *pb.WatchResponse {
	resp := &pb.WatchResponse{WatchId: id}
	for range n {
		resp.Events = append(resp.Events, &mvccpb.Event{Kv: &mvccpb.KeyValue{
			Value: []byte(fmt.Sprintf("%016x", time.Now().UnixNano()))}})
	}
	return resp
}

// TestFinishWaitsOnlyForWatchersNotCanceled: Finish stops waiting for the events of watchers the server
// canceled (counting what they had received) and reports them as an error; without a cancel it still waits
// for every event until EventTimeout.
func TestFinishWaitsOnlyForWatchersNotCanceled(t *testing.T) {
	const puts = 3 // on each key
	tests := []struct {
		name         string
		keys         int
		resps        []*pb.WatchResponse // one stream of two watchers, IDs 0 and 1; watcher i watches key i mod keys
		wantReceived int64
		wantCanceled int64
		wantErr      string
	}{
		{"every event", 1, []*pb.WatchResponse{created(0), created(1), events(0, 3), events(1, 2), events(1, 1)},
			6, 0, ""},
		{"canceled after one event", 1, []*pb.WatchResponse{created(0), created(1), events(1, 1), canceled(1),
			events(0, 3)}, 4, 1, "canceled 1 watchers; 4 of 6 events"},
		{"refused at its create", 1, []*pb.WatchResponse{created(0), {WatchId: 1, Created: true, Canceled: true},
			events(0, 3)}, 3, 1, "canceled 1 watchers; 3 of 6 events"},
		{"canceled watcher of the other key", 2, []*pb.WatchResponse{created(0), created(1), canceled(1),
			events(0, 2), events(0, 1)}, 3, 1, "canceled 1 watchers; 3 of 6 events"},
		{"events missing, nothing canceled", 1, []*pb.WatchResponse{created(0), created(1), events(0, 3),
			events(1, 2)}, 5, 0, "5 of 6 events received within"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timeout := 30 * time.Second
			if tt.wantCanceled == 0 && tt.wantErr != "" {
				timeout = 200 * time.Millisecond // waits for it
			}
			w, err := NewWatchBench("watch", WatchConfig{Streams: 1, WatchersPerStream: 2, ValSize: stampLen,
				Keys: KeySpace{KeySize: 8, KeySpaceSize: tt.keys}, EventTimeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				w.watchersOnKey[i%tt.keys]++
			}
			for k := range tt.keys {
				w.putsOnKey[k].Add(puts)
			}
			samples := &streamSamples{}
			w.streams = append(w.streams, samples)
			w.receive(&scriptedStream{resps: tt.resps}, samples, 0)

			began := time.Now()
			stats, err := w.Finish(context.Background())
			if waited := time.Since(began); tt.wantCanceled > 0 && waited > 10*time.Second {
				t.Fatalf("Finish waited %v for the canceled watcher's events", waited)
			}
			if stats.ReceivedEvents != tt.wantReceived || stats.CanceledWatchers != tt.wantCanceled {
				t.Fatalf("received %d, canceled %d; want %d, %d", stats.ReceivedEvents, stats.CanceledWatchers,
					tt.wantReceived, tt.wantCanceled)
			}
			if stats.ExpectedEvents != puts*2 {
				t.Fatalf("expected %d events, want %d", stats.ExpectedEvents, puts*2)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Finish: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Finish: %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

// TestWatchConnsSpreadStreams: with WatchEndpoints, the streams open WatchConns connections to each endpoint and
// take them in turn; every event still arrives. Two proxies in front of one etcd stand for two hubs, and count
// the connections made to each.
func TestWatchConnsSpreadStreams(t *testing.T) {
	cluster, _, ctx := startEtcd(t)
	target := strings.TrimPrefix(cluster.Endpoints()[0], "http://")
	proxies := []*loopbacktest.Proxy{loopbacktest.NewProxy(t, target, 0), loopbacktest.NewProxy(t, target, 0)}
	endpoints := []string{proxies[0].Addr, proxies[1].Addr}
	if err := (WatchConfig{Streams: 1, WatchersPerStream: 1, ValSize: stampLen, Keys: KeySpace{KeySize: 8,
		KeySpaceSize: 1}, WatchConns: -1}).Validate(); err == nil {
		t.Fatal("negative WatchConns accepted")
	}

	w, err := NewWatchBench("watch", WatchConfig{Streams: 12, WatchersPerStream: 2, ValSize: stampLen,
		Keys: KeySpace{KeySize: 8, KeySpaceSize: 1, Sequential: true}, WatchEndpoints: endpoints, WatchConns: 3})
	if err != nil {
		t.Fatal(err)
	}
	runner, err := NewRunner(RunnerConfig{Endpoints: cluster.Endpoints(), Clients: 1, Conns: 1, Total: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer runner.Stop(ctx)
	defer w.Close()
	if err := w.Open(ctx, runner); err != nil {
		t.Fatal(err)
	}
	for i, p := range proxies {
		if got := p.Accepted(); got != 3 {
			t.Fatalf("endpoint %d took %d connections, want 3", i, got)
		}
	}
	if _, err := runner.Drive(ctx, w.Report(), w.Op()); err != nil {
		t.Fatal(err)
	}
	stats, err := w.Finish(ctx)
	if err != nil || stats.ReceivedEvents != 12*2*10 {
		t.Fatalf("received %d events (%v), want %d", stats.ReceivedEvents, err, 12*2*10)
	}
}
