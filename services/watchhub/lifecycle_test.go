package watchhub

import (
	"context"
	"net"
	"testing"
	"time"
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
