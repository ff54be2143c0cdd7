package frontend_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// watchLog is what one stream's client saw, per watch ID, as comparable lines.
type watchLog struct {
	mu    sync.Mutex
	lines map[int64][]string
	ended error
}

func (l *watchLog) record(resp *pb.WatchResponse) {
	l.mu.Lock()
	defer l.mu.Unlock()
	add := func(line string) { l.lines[resp.WatchId] = append(l.lines[resp.WatchId], line) }
	if resp.Created {
		add("created")
	}
	for _, ev := range resp.Events {
		line := fmt.Sprintf("%v %s=%s@%d", ev.Type, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision)
		if ev.PrevKv != nil {
			line += fmt.Sprintf(" prev %s@%d", ev.PrevKv.Value, ev.PrevKv.ModRevision)
		}
		add(line)
	}
	if resp.Canceled {
		add(fmt.Sprintf("canceled %q compact %d", resp.CancelReason, resp.CompactRevision))
	}
}

func (l *watchLog) get(id int64) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines[id])
}

// TestRelayedWatchAsDirect: a client of a frontend sees, watch by watch, what a client of the hub itself
// sees: created, refused and canceled watches with their reasons and compact revisions, events live and from
// the past, filters and prev_kv, in the same order (the hub sends the frontend batches of responses).
func TestRelayedWatchAsDirect(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1, Watchhubs: 1})
	ctx := ctxFor(t)
	cli := c.Client(t)
	var compactAt int64
	for i := range 5 {
		put, err := cli.Put(ctx, "k", fmt.Sprint("old", i))
		if err != nil {
			t.Fatal(err)
		}
		compactAt = put.Header.Revision
	}
	if _, err := cli.Compact(ctx, compactAt); err != nil {
		t.Fatal(err)
	}
	const live = 40 // watchers 1..live of "k"
	creates := []*pb.WatchCreateRequest{
		{Key: []byte("p"), RangeEnd: []byte("q"), PrevKv: true, WatchId: 50},
		{Key: []byte("k"), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}, WatchId: 51},
		{Key: []byte("k"), StartRevision: compactAt, WatchId: 52},
		{Key: []byte("k"), WatchId: 1},                    // a duplicate: refused with watch ID -1
		{Key: []byte("k"), StartRevision: 1, WatchId: 54}, // compacted
	}
	for i := live; i >= 1; i-- {
		creates = append([]*pb.WatchCreateRequest{{Key: []byte("k"), WatchId: int64(i)}}, creates...)
	}

	open := func(endpoint string) (pb.Watch_WatchClient, *watchLog) {
		sctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		stream, err := pb.NewWatchClient(rawConn(t, endpoint)).Watch(sctx)
		if err != nil {
			t.Fatal(err)
		}
		log := &watchLog{lines: map[int64][]string{}}
		go func() {
			for {
				resp, err := stream.Recv()
				if err != nil {
					log.mu.Lock()
					log.ended = err
					log.mu.Unlock()
					return
				}
				log.record(resp)
			}
		}()
		for _, create := range creates {
			if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
				t.Fatal(err)
			}
		}
		return stream, log
	}
	direct, directLog := open(c.WatchhubURLs()[0])
	relayed, relayedLog := open(c.Endpoints()[0])
	for _, s := range []pb.Watch_WatchClient{direct, relayed} {
		if err := s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
			CancelRequest: &pb.WatchCancelRequest{WatchId: 2}}}); err != nil {
			t.Fatal(err)
		}
	}
	canceled := func(l *watchLog) bool {
		lines := l.get(2)
		return len(lines) == 2 && strings.HasPrefix(lines[1], "canceled")
	}
	waittest.Until(t, 20*time.Second, 10*time.Millisecond, "watch 2 canceled on both streams", func() bool {
		return canceled(directLog) && canceled(relayedLog)
	})

	for i := range 20 {
		if _, err := cli.Put(ctx, "k", fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"p/a", "p/b"} {
		if _, err := cli.Put(ctx, k, "x"); err != nil {
			t.Fatal(err)
		}
	}
	last, err := cli.Delete(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	lastLine := fmt.Sprintf("DELETE k=@%d", last.Header.Revision)
	done := func(l *watchLog) bool {
		for _, id := range []int64{1, live, 51, 52} {
			if lines := l.get(id); len(lines) == 0 || lines[len(lines)-1] != lastLine {
				return false
			}
		}
		return len(l.get(50)) == 3
	}
	waittest.Until(t, 20*time.Second, 10*time.Millisecond, "every event on both streams", func() bool {
		return done(directLog) && done(relayedLog)
	})

	ids := []int64{-1, 50, 51, 52, 54}
	for i := range live {
		ids = append(ids, int64(i+1))
	}
	for _, id := range ids {
		want, got := directLog.get(id), relayedLog.get(id)
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("watch %d through the frontend:\n%s\ndirect:\n%s", id, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if lines := directLog.get(51); len(lines) != 2 {
		t.Errorf("the NOPUT watch saw %q, want created and the delete", lines)
	}
	if lines := directLog.get(54); len(lines) != 2 || !strings.HasSuffix(lines[1], fmt.Sprintf(" compact %d", compactAt)) {
		t.Errorf("the compacted watch saw %q", lines)
	}
}

// TestRelayedWatchBytesIntact: responses relayed out of the pooled buffers the hub's batches are received into
// reach every client whole and unchanged while buffers are reused under them: many streams, each watcher of a
// key written from several goroutines at once with values of several KiB (batches past gRPC's pooling
// threshold), must get every value once, each still the one written.
func TestRelayedWatchBytesIntact(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1, Watchhubs: 1})
	ctx := ctxFor(t)
	const streams, watchers, writers, perWriter = 8, 25, 4, 30
	value := func(i int) string { return strings.Repeat(fmt.Sprintf("%08d", i), 384) } // 3 KiB
	type seen struct {
		mu    sync.Mutex
		vals  map[int64]map[string]int // watch ID -> value -> times
		bad   []string
		ended error
	}
	var all []*seen
	for range streams {
		sctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		stream, err := pb.NewWatchClient(rawConn(t, c.Endpoints()[0])).Watch(sctx)
		if err != nil {
			t.Fatal(err)
		}
		s := &seen{vals: map[int64]map[string]int{}}
		all = append(all, s)
		for id := range int64(watchers) {
			if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
				CreateRequest: &pb.WatchCreateRequest{Key: []byte("big"), WatchId: id}}}); err != nil {
				t.Fatal(err)
			}
		}
		created := make(chan struct{}, watchers)
		go func() {
			for {
				resp, err := stream.Recv()
				if err != nil {
					s.mu.Lock()
					s.ended = err
					s.mu.Unlock()
					return
				}
				if resp.Created {
					created <- struct{}{}
				}
				s.mu.Lock()
				for _, ev := range resp.Events {
					v := string(ev.Kv.Value)
					if len(v) != 3072 || v != strings.Repeat(v[:8], 384) {
						s.bad = append(s.bad, fmt.Sprintf("watch %d revision %d: %.40q (%d bytes)", resp.WatchId,
							ev.Kv.ModRevision, v, len(v)))
					}
					if s.vals[resp.WatchId] == nil {
						s.vals[resp.WatchId] = map[string]int{}
					}
					s.vals[resp.WatchId][v]++
				}
				s.mu.Unlock()
			}
		}()
		for range watchers {
			select {
			case <-created:
			case <-time.After(20 * time.Second):
				t.Fatal("watches not created")
			}
		}
	}
	cli := c.Client(t)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				if _, err := cli.Put(ctx, "big", value(w*perWriter+i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	const total = writers * perWriter
	waittest.Until(t, 30*time.Second, 20*time.Millisecond, "every value on every watcher", func() bool {
		for _, s := range all {
			s.mu.Lock()
			complete := true
			for id := range int64(watchers) {
				complete = complete && len(s.vals[id]) >= total
			}
			complete = complete || len(s.bad) > 0 || s.ended != nil // no use waiting
			s.mu.Unlock()
			if !complete {
				return false
			}
		}
		return true
	})
	for i, s := range all {
		s.mu.Lock()
		if len(s.bad) > 0 {
			t.Errorf("stream %d got altered values: %s", i, strings.Join(s.bad[:min(5, len(s.bad))], "; "))
		}
		if s.ended != nil {
			t.Errorf("stream %d ended: %v", i, s.ended)
		}
		for id, vals := range s.vals {
			for v, times := range vals {
				if times != 1 {
					t.Errorf("stream %d watch %d got %.16q %d times", i, id, v, times)
				}
			}
		}
		s.mu.Unlock()
	}
}
