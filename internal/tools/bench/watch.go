package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// stampLen is the bytes of a put's value that carry its issue time (hex Unix nanoseconds).
const stampLen = 16

// WatchConfig configures the watch benchmarks (etcd's watch and watch-latency): Streams watch streams, each
// with WatchersPerStream watchers; watcher i watches key i mod Keys.KeySpaceSize; the driven Op puts the keys
// in turn. Every event's latency is from its put being issued to the watcher receiving it (etcd's
// watch-latency measures the same).
type WatchConfig struct {
	Streams           int
	WatchersPerStream int
	Keys              KeySpace
	// ValSize is the put value size; at least 16 (the value carries the put's issue time).
	ValSize int
	PrevKV  bool
	// WatchEndpoints, when set, are dialled for the watch streams (e.g. watchhubs directly) while puts go to
	// the runner's endpoints; by default streams use the runner's connections.
	WatchEndpoints []string
	// WatchConns is how many connections the streams open to each of WatchEndpoints [--watch-conns]; the
	// streams take the connections in turn. Default 1. Each connection is one writer goroutine at the server
	// and one reader at the client, both serial, so a single one caps what a server can deliver however many
	// cores it has; the runner's --conns connections spread over --endpoints the same way.
	WatchConns int
	// MemoryURLs are /metrics URLs of the servers that hold the watchers (watchhubs, or etcd members): the
	// growth of their go_memstats_heap_inuse_bytes from before the watchers are created to just after, over
	// the watchers, is the memory per idle watcher (the servers' garbage not yet collected included).
	MemoryURLs []string
	// EventTimeout bounds the wait for the last events once the puts are done. Default 60s.
	EventTimeout time.Duration
}

// Validate reports a config that cannot run.
func (c WatchConfig) Validate() error {
	switch {
	case c.Streams <= 0 || c.WatchersPerStream <= 0:
		return fmt.Errorf("bench: want positive --streams and watchers per stream, got %d and %d", c.Streams, c.WatchersPerStream)
	case c.ValSize < stampLen:
		return fmt.Errorf("bench: --val-size %d is below %d (the value carries the put's time)", c.ValSize, stampLen)
	case c.WatchConns < 0:
		return fmt.Errorf("bench: negative --watch-conns (%d)", c.WatchConns)
	}
	return c.Keys.Validate()
}

// WatchStats are a watch run's figures besides the latency summary.
type WatchStats struct {
	Watchers, Streams int
	// CreateSec is how long creating every watcher took.
	CreateSec float64
	// Puts were acknowledged; ExpectedEvents is what the watchers of their keys should receive.
	Puts, ExpectedEvents, ReceivedEvents int64
	// CanceledWatchers were canceled by the server (a Cairn hub sheds watchers that fall more than
	// --max-watch-lag behind); the events they would have received after it are not waited for.
	CanceledWatchers int64
	// EventsPerSec is events received over the time from the first put to the last event.
	EventsPerSec float64
	// HeapBytesPerWatcher is the servers' heap growth per watcher while the watchers were created; -1 without
	// MemoryURLs.
	HeapBytesPerWatcher float64
}

// Params renders the figures as Summary params.
func (s WatchStats) Params() map[string]string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	return map[string]string{
		"watchers": strconv.Itoa(s.Watchers), "streams": strconv.Itoa(s.Streams), "create_sec": strconv.FormatFloat(s.CreateSec, 'f', 3, 64),
		"puts": strconv.FormatInt(s.Puts, 10), "expected_events": strconv.FormatInt(s.ExpectedEvents, 10),
		"received_events": strconv.FormatInt(s.ReceivedEvents, 10), "events_per_sec": f(s.EventsPerSec),
		"heap_bytes_per_watcher": f(s.HeapBytesPerWatcher), "canceled_watchers": strconv.FormatInt(s.CanceledWatchers, 10),
	}
}

// WatchBench is one watch benchmark run: Open creates the watchers, Op is driven with Runner.Drive (one put
// per request), Finish waits for the events and returns the figures, Close ends the streams.
type WatchBench struct {
	cfg    WatchConfig
	report *Report
	conns  []*grpc.ClientConn
	cancel context.CancelFunc
	value  string

	watchersOnKey []int64
	putsOnKey     []atomic.Int64
	canceledOnKey []atomic.Int64 // watchers of the key the server canceled
	// canceledReceived is what the canceled watchers had received when they were canceled.
	canceledReceived atomic.Int64
	created          atomic.Int64
	firstPut         atomic.Int64 // Unix nanoseconds
	createSec        float64
	heapPerWatch     float64
	streams          []*streamSamples
}

// streamSamples are one stream's event latencies and counts, kept apart so that streams do not contend (a
// counter every stream's receiver adds to, once per response, is a cache line that every core takes in turn);
// Finish sums the counts and moves the latencies into the report.
type streamSamples struct {
	mu        sync.Mutex
	latencies []time.Duration
	received  int64 // events received
	lastEvent int64 // when the last one came, Unix nanoseconds
}

// receivedEvents sums the streams' events received, and returns when the last of them came.
func (w *WatchBench) receivedEvents() (received, last int64) {
	for _, samples := range w.streams {
		samples.mu.Lock()
		received += samples.received
		last = max(last, samples.lastEvent)
		samples.mu.Unlock()
	}
	return received, last
}

// NewWatchBench checks cfg; the report is named name.
func NewWatchBench(name string, cfg WatchConfig) (*WatchBench, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.EventTimeout == 0 {
		cfg.EventTimeout = 60 * time.Second
	}
	return &WatchBench{cfg: cfg, report: NewReport(name), value: strings.Repeat("v", cfg.ValSize-stampLen),
		watchersOnKey: make([]int64, cfg.Keys.KeySpaceSize), putsOnKey: make([]atomic.Int64, cfg.Keys.KeySpaceSize),
		canceledOnKey: make([]atomic.Int64, cfg.Keys.KeySpaceSize)}, nil
}

// Report is where every event's latency is recorded; drive the Op with it.
func (w *WatchBench) Report() *Report { return w.report }

// Open opens the streams (on the runner's connections, or on WatchEndpoints) and creates every watcher, and
// waits until all are created.
func (w *WatchBench) Open(ctx context.Context, runner *Runner) error {
	conns, err := w.streamConns(runner)
	if err != nil {
		return err
	}
	heapBefore := scrapeHeap(ctx, w.cfg.MemoryURLs)
	streamCtx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	began := time.Now()
	total := int64(w.cfg.Streams * w.cfg.WatchersPerStream)
	for s := range w.cfg.Streams {
		stream, err := pb.NewWatchClient(conns[s%len(conns)]).Watch(streamCtx)
		if err != nil {
			return fmt.Errorf("bench: watch stream %d: %w", s, err)
		}
		samples := &streamSamples{}
		w.streams = append(w.streams, samples)
		go w.receive(stream, samples, s*w.cfg.WatchersPerStream)
		for i := s * w.cfg.WatchersPerStream; i < (s+1)*w.cfg.WatchersPerStream; i++ {
			keyNum := i % w.cfg.Keys.KeySpaceSize
			w.watchersOnKey[keyNum]++
			req := &pb.WatchCreateRequest{Key: []byte(w.cfg.Keys.Key(int64(keyNum))), PrevKv: w.cfg.PrevKV}
			if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
				return fmt.Errorf("bench: create watcher %d: %w", i, err)
			}
		}
	}
	for w.created.Load() < total {
		if ctx.Err() != nil {
			return fmt.Errorf("bench: %d of %d watchers created: %w", w.created.Load(), total, ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.createSec = time.Since(began).Seconds()
	w.heapPerWatch = -1
	if len(w.cfg.MemoryURLs) > 0 {
		w.heapPerWatch = (scrapeHeap(ctx, w.cfg.MemoryURLs) - heapBefore) / float64(total)
	}
	return nil
}

// streamConns are the connections the streams use.
func (w *WatchBench) streamConns(runner *Runner) ([]*grpc.ClientConn, error) {
	if len(w.cfg.WatchEndpoints) == 0 {
		var conns []*grpc.ClientConn
		for _, c := range runner.Clients() {
			conns = append(conns, c.ActiveConnection())
		}
		return conns, nil
	}
	// Endpoint after endpoint, so that streams taking the connections in turn spread evenly over the endpoints.
	for i := range max(w.cfg.WatchConns, 1) * len(w.cfg.WatchEndpoints) {
		e := w.cfg.WatchEndpoints[i%len(w.cfg.WatchEndpoints)]
		conn, err := grpc.NewClient(strings.TrimPrefix(e, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<31-1)))
		if err != nil {
			return nil, fmt.Errorf("bench: watch endpoint %s: %w", e, err)
		}
		w.conns = append(w.conns, conn)
	}
	return w.conns, nil
}

// receive records every event of one stream, whose watchers are first, first+1, ... in the order they were
// created (a stream's creates are answered in order).
func (w *WatchBench) receive(stream pb.Watch_WatchClient, samples *streamSamples, first int) {
	keyOf := map[int64]int{}        // watch ID -> its key's number, while not canceled
	receivedBy := map[int64]int64{} // watch ID -> events received
	created := 0
	for {
		resp, err := stream.Recv()
		if err != nil {
			return
		}
		if resp.Created {
			keyOf[resp.WatchId] = (first + created) % w.cfg.Keys.KeySpaceSize
			created++
			w.created.Add(1)
		}
		if resp.Canceled {
			w.report.Record(0, fmt.Errorf("watch %d canceled: %s (compact revision %d)", resp.WatchId, resp.CancelReason, resp.CompactRevision))
			if key, ok := keyOf[resp.WatchId]; ok {
				delete(keyOf, resp.WatchId)
				w.canceledReceived.Add(receivedBy[resp.WatchId])
				delete(receivedBy, resp.WatchId)
				w.canceledOnKey[key].Add(1)
			}
		}
		if n := len(resp.Events); n > 0 {
			receivedBy[resp.WatchId] += int64(n)
		}
		now := time.Now()
		samples.mu.Lock()
		for _, ev := range resp.Events {
			issued, err := strconv.ParseInt(string(ev.Kv.Value[:min(stampLen, len(ev.Kv.Value))]), 16, 64)
			if err != nil {
				w.report.Record(0, errors.New("event value without a put time"))
				continue
			}
			samples.latencies = append(samples.latencies, now.Sub(time.Unix(0, issued)))
		}
		if n := len(resp.Events); n > 0 {
			samples.received += int64(n)
			samples.lastEvent = now.UnixNano()
		}
		samples.mu.Unlock()
	}
}

// Op puts the watched keys in turn, each value stamped with its issue time.
func (w *WatchBench) Op() Op {
	return func(ctx context.Context, client *clientv3.Client, seq int64) error {
		keyNum := seq % int64(w.cfg.Keys.KeySpaceSize)
		now := time.Now()
		w.firstPut.CompareAndSwap(0, now.UnixNano())
		value := fmt.Sprintf("%016x", now.UnixNano()) + w.value
		if _, err := client.Put(ctx, w.cfg.Keys.Key(keyNum), value); err != nil {
			return err
		}
		w.putsOnKey[keyNum].Add(1)
		return nil
	}
}

// Finish waits until every event of the acknowledged puts has arrived, except those of watchers the server
// canceled, (or EventTimeout) and returns the figures. Canceled watchers are an error.
func (w *WatchBench) Finish(ctx context.Context) (WatchStats, error) {
	stats := WatchStats{Watchers: w.cfg.Streams * w.cfg.WatchersPerStream, Streams: w.cfg.Streams,
		CreateSec: w.createSec, HeapBytesPerWatcher: w.heapPerWatch}
	for k := range w.putsOnKey {
		puts := w.putsOnKey[k].Load()
		stats.Puts += puts
		stats.ExpectedEvents += puts * w.watchersOnKey[k]
	}
	deadline := time.Now().Add(w.cfg.EventTimeout)
	received, lastEvent := w.receivedEvents()
	for received < w.awaited() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		received, lastEvent = w.receivedEvents()
	}
	stats.ReceivedEvents = received
	stats.CanceledWatchers = w.canceled()
	for _, samples := range w.streams {
		samples.mu.Lock()
		w.report.RecordLatencies(samples.latencies)
		samples.latencies = nil
		samples.mu.Unlock()
	}
	if first, last := w.firstPut.Load(), lastEvent; last > first && first > 0 {
		stats.EventsPerSec = float64(stats.ReceivedEvents) / time.Duration(last-first).Seconds()
	}
	if stats.CanceledWatchers > 0 {
		return stats, fmt.Errorf("bench: the server canceled %d watchers; %d of %d events received", stats.CanceledWatchers,
			stats.ReceivedEvents, stats.ExpectedEvents)
	}
	if stats.ReceivedEvents < stats.ExpectedEvents {
		return stats, fmt.Errorf("bench: %d of %d events received within %s", stats.ReceivedEvents, stats.ExpectedEvents, w.cfg.EventTimeout)
	}
	return stats, nil
}

// awaited is how many events the watchers can still receive in all: every acknowledged put's events for the
// watchers of its key that are not canceled, plus what the canceled ones had received.
func (w *WatchBench) awaited() int64 {
	n := w.canceledReceived.Load()
	for k := range w.putsOnKey {
		n += w.putsOnKey[k].Load() * (w.watchersOnKey[k] - w.canceledOnKey[k].Load())
	}
	return n
}

// canceled is how many watchers the server canceled.
func (w *WatchBench) canceled() int64 {
	var n int64
	for k := range w.canceledOnKey {
		n += w.canceledOnKey[k].Load()
	}
	return n
}

// Close ends the streams.
func (w *WatchBench) Close() {
	if w.cancel != nil {
		w.cancel()
	}
	for _, c := range w.conns {
		_ = c.Close()
	}
}

// scrapeHeap sums go_memstats_heap_inuse_bytes over the /metrics URLs (0 for one that does not answer).
// A server that serves /debug/pprof next to /metrics (Cairn's services and etcd with --enable-pprof) is
// first made to collect its garbage, so the figure is live memory.
func scrapeHeap(ctx context.Context, urls []string) float64 {
	var sum float64
	for _, u := range urls {
		collectGarbage(ctx, strings.TrimSuffix(u, "/metrics")+"/debug/pprof/heap?gc=1")
		sum += scrapeMetric(ctx, u, "go_memstats_heap_inuse_bytes")
	}
	return sum
}

// collectGarbage asks a Go server's pprof heap endpoint for a profile after a GC; failures are ignored.
func collectGarbage(ctx context.Context, url string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}

func scrapeMetric(ctx context.Context, url, name string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 64<<10), 1<<20)
	for scanner.Scan() {
		if fields := strings.Fields(scanner.Text()); len(fields) == 2 && fields[0] == name {
			v, _ := strconv.ParseFloat(fields[1], 64)
			return v
		}
	}
	return 0
}
