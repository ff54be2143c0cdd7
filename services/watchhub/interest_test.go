package watchhub

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/eventbus/eventbustest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/nats-io/nats.go"
)

// TestIdleHubWakesAtStoragesRevision: a hub without watch streams does not follow the store (the storages'
// publishers send nothing nobody wants, what they still send it drops, and it fills nothing) and holds no
// window; its first stream wakes it at storage's revision, so a watch from now starts there and a watch from
// the past gets every event from history, once, in order.
func TestIdleHubWakesAtStoragesRevision(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window int
		// poll is the hub's StoragePollInterval; 0 the tests' 50 ms.
		poll time.Duration
		// sinceStart: the writes come while the new storages' publishers still send every record (their first
		// InterestTTL); otherwise after it, when they send nothing unwanted.
		sinceStart bool
		// watchedBefore: a stream watched the first writes into the window and closed before the idle ones.
		watchedBefore bool
	}{
		{name: "gap filled into the window"},
		{name: "gap larger than the window jumped", window: 5},
		// The wake must ask storage: an unwatched hub's last poll can be seconds old (its wait stretches).
		{name: "gap larger than the window, no poll since the writes, jumped", window: 5, poll: time.Minute},
		{name: "records the publishers still send dropped", sinceStart: true},
		{name: "window emptied when the last stream closed", watchedBefore: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testIdleHubWakes(t, tc.window, tc.poll, tc.sinceStart, tc.watchedBefore)
		})
	}
}

func testIdleHubWakes(t *testing.T, window int, poll time.Duration, sinceStart, watchedBefore bool) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{WindowRevisions: window, StoragePollInterval: poll})
	if !sinceStart {
		time.Sleep(eventbus.DefaultInterestTTL) // a new publisher sends for that long before it stops unwanted records
	}
	if watchedBefore {
		before := openRaw(t, dialHub(t, h.Addr()))
		before.create(&pb.WatchCreateRequest{Key: []byte("k"), WatchId: 1})
		before.next(5 * time.Second) // created
		for i := range 10 {
			rev := env.put("k", string(rune('A'+i)))
			if resp := before.next(5 * time.Second); len(resp.Events) != 1 || resp.Events[0].Kv.ModRevision != rev {
				t.Fatalf("watched write %d: got %v, want revision %d", i, resp, rev)
			}
		}
		h.mu.RLock()
		held := h.win.count
		h.mu.RUnlock()
		if held < 10 {
			t.Fatalf("window holds %d revisions while watched, want the 10 written", held)
		}
		before.cancel()
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the unwatched hub's window emptied", func() bool {
			h.mu.RLock()
			defer h.mu.RUnlock()
			return h.win.count == 0 && len(h.win.ring) == min(h.cfg.WindowRevisions, initialWindowRing)
		})
	}
	start := h.headRev.Load()
	var last int64
	for i := range 20 {
		last = env.put("k", string(rune('a'+i)))
	}
	time.Sleep(200 * time.Millisecond) // four storage polls: a following hub would have filled them
	if head := h.headRev.Load(); head != start {
		t.Fatalf("idle hub moved its head from %d to %d", start, head)
	}
	h.mu.RLock()
	held := h.win.count
	h.mu.RUnlock()
	if held != 0 && (sinceStart || watchedBefore) {
		t.Fatalf("idle hub holds %d revisions in its window", held)
	}

	rs := openRaw(t, dialHub(t, h.Addr()))
	// The stream wakes the hub; the watch waits until the hub has caught up. A watch created earlier races the
	// wake's storage poll: once it exists the hub fills the gap instead of jumping (it must not miss a
	// revision), so the window below would depend on which came first.
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the woken hub at storage's revision", func() bool {
		return h.headRev.Load() == last
	})
	rs.create(&pb.WatchCreateRequest{Key: []byte("k"), WatchId: 1})
	created := rs.next(5 * time.Second)
	if !created.Created || created.Header.Revision != last {
		t.Fatalf("watch from now created at revision %d (created %v), want %d", created.Header.Revision, created.Created, last)
	}
	h.mu.RLock()
	held = h.win.count
	h.mu.RUnlock()
	if jumped := window > 0 && window < 20; jumped != (held == 0) {
		t.Fatalf("window holds %d revisions after waking; want it empty only after a jump (window %d, gap 20)", held, window)
	}
	rs.create(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: start + 1, WatchId: 2})
	var fromPast []int64
	for len(fromPast) < 20 {
		resp := rs.next(5 * time.Second)
		if resp.WatchId != 2 || resp.Created {
			continue
		}
		for _, ev := range resp.Events {
			fromPast = append(fromPast, ev.Kv.ModRevision)
		}
	}
	for i, rev := range fromPast {
		if rev != start+1+int64(i) {
			t.Fatalf("watch from the past got revisions %v, want %d..%d", fromPast, start+1, last)
		}
	}
	next := env.put("k", "live")
	for got := map[int64]bool{}; len(got) < 2; {
		resp := rs.next(5 * time.Second)
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != next || got[resp.WatchId] {
				t.Fatalf("watch %d got revision %d, want %d once", resp.WatchId, ev.Kv.ModRevision, next)
			}
			got[resp.WatchId] = true
		}
	}
}

// TestInterestAnnouncedWhileWatched: a hub announces that it needs the applied records at once when its first
// stream opens, then every interestInterval while it has streams, and never while it has none; so the storages'
// publishers (InterestTTL 3s) keep sending to a watched hub and stop within an InterestTTL once every hub is idle.
// Time is the subject, so it runs on synctest's fake clock, on an in-process bus.
func TestInterestAnnouncedWhileWatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := eventbustest.Start(t)
		start := time.Now()
		var mu sync.Mutex
		var heard []time.Duration // when each announcement arrived, since start
		publisher := bus.Connect(t, "publisher")
		if _, err := publisher.Subscribe(eventbus.InterestSubject("test"), func(*nats.Msg) {
			mu.Lock()
			defer mu.Unlock()
			heard = append(heard, time.Since(start))
		}); err != nil {
			t.Fatal(err)
		}
		eventbustest.Flush(t, publisher)
		h := &Hub{cfg: Config{SubjectPrefix: "test"}, logger: quietLogger(), nc: bus.Connect(t, "hub"),
			streams: map[*stream]struct{}{}, firstStream: make(chan struct{}, 1), feed: &feed{}}
		ctx, cancel := context.WithCancel(t.Context())
		announcerDone := make(chan struct{})
		go func() { defer close(announcerDone); h.announceInterest(ctx) }()
		setStreams := func(s *stream, open bool) {
			h.mu.Lock()
			defer h.mu.Unlock()
			if open {
				h.streams[s] = struct{}{}
			} else {
				delete(h.streams, s)
			}
			h.streamsChanged()
		}
		heardSoFar := func() []time.Duration {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(heard)
		}

		time.Sleep(5 * time.Second)
		if got := heardSoFar(); len(got) != 0 {
			t.Fatalf("a hub without streams announced at %v", got)
		}
		s := &stream{}
		setStreams(s, true)
		if got := heardSoFar(); !slices.Equal(got, []time.Duration{5 * time.Second}) {
			t.Fatalf("announcements %v after the first stream opened at 5s, want one at once", got)
		}
		time.Sleep(2500 * time.Millisecond)
		want := []time.Duration{5 * time.Second, 6 * time.Second, 7 * time.Second}
		if got := heardSoFar(); !slices.Equal(got, want) {
			t.Fatalf("announcements %v while watched from 5s to 7.5s, want %v (every %v)", got, want, interestInterval)
		}
		setStreams(s, false)
		time.Sleep(5 * time.Second)
		if got := heardSoFar(); !slices.Equal(got, want) {
			t.Fatalf("announcements %v after the last stream closed at 7.5s, want none after %v", got, want)
		}
		cancel()
		<-announcerDone
	})
}

// TestCreatesWaitForTheWake: from the first stream's wake until the feed has caught up on it, creates wait
// (waitAwake), so that the feed's look at storage's revision comes before any watch exists; a later stream
// wakes nothing; a wake the feed never takes holds a create only until its deadline.
func TestCreatesWaitForTheWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &Hub{streams: map[*stream]struct{}{}, firstStream: make(chan struct{}, 1),
			feed: &feed{wake: make(chan struct{}, 1)}}
		open := func(s *stream) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.streams[s] = struct{}{}
			h.streamsChanged()
		}
		// waited starts a create's wait and returns a function reporting how long it has waited, false while it
		// still waits.
		waited := func(timeout time.Duration) func() (time.Duration, bool) {
			start := time.Now()
			var took time.Duration
			done := make(chan struct{})
			go func() {
				defer close(done)
				h.waitAwake(t.Context(), start.Add(timeout))
				took = time.Since(start)
			}()
			return func() (time.Duration, bool) {
				synctest.Wait()
				select {
				case <-done:
					return took, true
				default:
					return 0, false
				}
			}
		}

		if took, ok := waited(time.Minute)(); !ok || took != 0 {
			t.Fatalf("a create on a hub that was never woken waited (%v, done %v)", took, ok)
		}
		open(&stream{})
		if len(h.feed.wake) != 1 {
			t.Fatal("the first stream queued no wake")
		}
		first := waited(time.Minute)
		time.Sleep(time.Second)
		if _, ok := first(); ok {
			t.Fatal("a create went on before the feed caught up on the wake")
		}
		open(&stream{}) // a second stream: nothing new to wait for
		<-h.feed.wake   // the feed takes the wake and catches up
		h.awoken()
		if took, ok := first(); !ok || took != time.Second {
			t.Fatalf("the waiting create went on after %v (done %v), want 1s, when the feed caught up", took, ok)
		}
		if took, ok := waited(time.Minute)(); !ok || took != 0 {
			t.Fatalf("a create after the catch-up waited (%v, done %v)", took, ok)
		}

		h.mu.Lock()
		clear(h.streams)
		h.streamsChanged()
		h.mu.Unlock()
		open(&stream{}) // woken again, and the feed never takes it
		stuck := waited(2 * time.Second)
		time.Sleep(3 * time.Second)
		if took, ok := stuck(); !ok || took != 2*time.Second {
			t.Fatalf("a create waiting on a wake the feed does not take went on after %v (done %v), want its 2s deadline", took, ok)
		}
	})
}
