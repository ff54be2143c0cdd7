package watchhub

import (
	"context"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
)

// TestHubServesGivenListenerAndStopsTwice: a hub serves the listener its caller bound, and a second Stop (or
// a concurrent one) returns at once instead of closing the stopping channel again.
func TestHubServesGivenListenerAndStopsTwice(t *testing.T) {
	env := newTestEnv(t, 1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{ListenURL: "http://127.0.0.1:1", NATSURL: env.natsURL(), StorageEndpoints: []string{env.storages[0].cfg.ListenURL}}
	h, err := New(cfg, Deps{Logger: quietLogger(), Listener: lis})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.Addr() != lis.Addr().String() {
		t.Fatalf("Addr() = %s, want the given listener's %s", h.Addr(), lis.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- h.Stop(ctx) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	if err := h.Stop(ctx); err != nil {
		t.Fatalf("third Stop: %v", err)
	}
}

// TestFirstWriteComesOverTheBus: a hub serves only once the NATS server has its subscription, so the first
// write after its first watch comes over the bus. Here the hub's own bytes reach the server half a second late
// (the storage's do not), and the hub polls storage only every 10 s: a hub that served before the server had
// its subscription would miss the write on the bus and learn of it only at that poll.
func TestFirstWriteComesOverTheBus(t *testing.T) {
	env := newTestEnv(t, 1)
	env.publishAlways = true
	env.stopStorage(0)
	env.startStorage(0)
	slowNATS := loopbacktest.DelayedProxy(t, env.natsURL()[len("nats://"):], 500*time.Millisecond)
	h := env.startHub(Config{NATSURL: "nats://" + slowNATS, StoragePollInterval: 10 * time.Second})
	cli := newClient(t, h.Addr())
	wch := cli.Watch(ctxT(t), "first", clientv3.WithCreatedNotify())
	<-wch
	rev := env.put("first", "v")
	if evs := recvEvents(t, wch, 1, 3*time.Second); evs[0].Kv.ModRevision != rev {
		t.Fatalf("event at %d, want the put at %d", evs[0].Kv.ModRevision, rev)
	}
}
