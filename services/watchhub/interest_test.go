package watchhub

import (
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/eventbus"
)

// TestIdleHubWakesAtStoragesRevision: a hub without watch streams does not follow the store (the storages'
// publishers send nothing nobody wants, and it fills nothing); its first stream wakes it at storage's revision,
// so a watch from now starts there and a watch from the past gets every event from history, once, in order.
func TestIdleHubWakesAtStoragesRevision(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window int
	}{
		{"gap filled into the window", 0},
		{"gap larger than the window jumped", 5},
	} {
		t.Run(tc.name, func(t *testing.T) { testIdleHubWakes(t, tc.window) })
	}
}

func testIdleHubWakes(t *testing.T, window int) {
	env := newTestEnv(t, 1)
	h := env.startHub(Config{WindowRevisions: window})
	time.Sleep(eventbus.DefaultInterestTTL) // a new publisher sends for that long before it stops unwanted records
	start := h.headRev.Load()
	var last int64
	for i := range 20 {
		last = env.put("k", string(rune('a'+i)))
	}
	time.Sleep(200 * time.Millisecond) // four storage polls: a following hub would have filled them
	if head := h.headRev.Load(); head != start {
		t.Fatalf("idle hub moved its head from %d to %d", start, head)
	}

	rs := openRaw(t, dialHub(t, h.Addr()))
	rs.create(&pb.WatchCreateRequest{Key: []byte("k"), WatchId: 1})
	created := rs.next(5 * time.Second)
	if !created.Created || created.Header.Revision != last {
		t.Fatalf("watch from now created at revision %d (created %v), want %d", created.Header.Revision, created.Created, last)
	}
	h.mu.RLock()
	held := h.win.count
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
