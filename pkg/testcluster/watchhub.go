package testcluster

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairn-kv/cairn/pkg/eventbus"
	"github.com/cairn-kv/cairn/pkg/obs"
	"github.com/cairn-kv/cairn/services/storage"
	"github.com/cairn-kv/cairn/services/watchhub"
)

// bus is the cluster's event bus: an embedded NATS server on a fixed loopback port, so it can be stopped and
// started again at the same address.
type bus struct {
	mu   sync.Mutex
	addr string
	srv  *eventbus.Embedded
}

func (b *bus) url() string { return "nats://" + b.addr }

func (b *bus) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv != nil {
		return nil
	}
	_, port, err := net.SplitHostPort(b.addr)
	if err != nil {
		return err
	}
	var p int
	if _, err := fmt.Sscan(port, &p); err != nil {
		return err
	}
	srv, err := eventbus.StartEmbedded(eventbus.EmbeddedConfig{Port: p})
	if err != nil {
		return fmt.Errorf("nats on %s: %w", b.addr, err)
	}
	b.srv = srv
	return nil
}

func (b *bus) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv = nil
	}
}

// StopNATS shuts the event bus down (records published meanwhile are lost; hubs fill them from storage).
func (c *Cluster) StopNATS() { c.bus.stop() }

// StartNATS starts the event bus again at the same address.
func (c *Cluster) StartNATS() error { return c.bus.start() }

// NATSURL is the event bus's URL ("" without watchhubs).
func (c *Cluster) NATSURL() string {
	if c.bus == nil {
		return ""
	}
	return c.bus.url()
}

// busSink is a storage's publisher on the bus, with its connection.
type busSink struct {
	nc  *nats.Conn
	pub *eventbus.Publisher
}

// newBusSink connects a member's storage to the bus, or returns nil when the cluster has none.
func (c *Cluster) newBusSink(memberID uint64, name string) (*busSink, error) {
	if c.bus == nil {
		return nil, nil
	}
	nc, err := eventbus.Connect(c.bus.url(), "storage-"+name, logger("eventbus", name))
	if err != nil {
		return nil, err
	}
	pub := eventbus.NewPublisher(nc, eventbus.PublisherConfig{MemberID: memberID}, nil, logger("eventbus", name))
	pub.Start()
	return &busSink{nc: nc, pub: pub}, nil
}

func (s *busSink) sink(memberID uint64) storage.AppliedSink {
	if s == nil {
		return nil
	}
	return storage.BusSink{Publisher: s.pub, MemberID: memberID}
}

func (s *busSink) close(ctx context.Context) {
	if s == nil {
		return
	}
	_ = s.pub.Stop(ctx)
	s.nc.Close()
}

// Watchhub is one watchhub of the cluster; it keeps its URL across restarts.
type Watchhub struct {
	Name    string
	URL     string
	cluster *Cluster

	mu  sync.Mutex
	hub *watchhub.Hub
}

// Hub is the running hub, or nil while it is stopped.
func (w *Watchhub) Hub() *watchhub.Hub {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hub
}

// Config is the hub's configuration: every member's storage, the cluster's bus.
func (w *Watchhub) Config() watchhub.Config {
	cfg := watchhub.Config{ListenURL: w.URL, NATSURL: w.cluster.bus.url(), AdminAddr: "127.0.0.1:0",
		StoragePollInterval: 100 * time.Millisecond}
	for _, m := range w.cluster.members {
		cfg.StorageEndpoints = append(cfg.StorageEndpoints, m.StorageURL)
	}
	if w.cluster.opts.ConfigureWatchhub != nil {
		w.cluster.opts.ConfigureWatchhub(&cfg)
	}
	return cfg
}

// Start starts the hub.
func (w *Watchhub) Start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hub != nil {
		return fmt.Errorf("watchhub %s already running", w.Name)
	}
	hub, err := watchhub.New(w.Config(), obs.NoTelemetry(), logger("watchhub", w.Name))
	if err != nil {
		return fmt.Errorf("watchhub %s: %w", w.Name, err)
	}
	if err := hub.Start(context.Background()); err != nil {
		return fmt.Errorf("watchhub %s: %w", w.Name, err)
	}
	w.hub = hub
	return nil
}

// Stop stops the hub (a no-op when it is stopped); its streams end with Unavailable.
func (w *Watchhub) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hub == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	_ = w.hub.Stop(ctx)
	w.hub = nil
}

// Watchhubs returns every watchhub.
func (c *Cluster) Watchhubs() []*Watchhub { return c.watchhubs }

// WatchhubURLs returns every watchhub's URL.
func (c *Cluster) WatchhubURLs() []string {
	var urls []string
	for _, w := range c.watchhubs {
		urls = append(urls, w.URL)
	}
	return urls
}

// addWatchhubs prepares the bus and n hubs on reserved addresses.
func (c *Cluster) addWatchhubs(t testing.TB, n int) {
	if n == 0 {
		return
	}
	c.bus = &bus{addr: reserveAddr(t)}
	if err := c.bus.start(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		c.watchhubs = append(c.watchhubs, &Watchhub{Name: fmt.Sprintf("wh%d", i+1),
			URL: "http://" + reserveAddr(t), cluster: c})
	}
}
