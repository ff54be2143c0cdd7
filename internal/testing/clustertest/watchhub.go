package clustertest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/services/watchhub"
)

// bus is the cluster's event bus: an embedded NATS server on loopback. Its first start takes a port of its
// own choosing (no free port is picked and bound later); it keeps that address across StopNATS and StartNATS.
type bus struct {
	mu   sync.Mutex
	addr string // "" until the first start
	srv  *eventbus.Embedded
}

func (b *bus) url() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return "nats://" + b.addr
}

func (b *bus) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv != nil {
		return nil
	}
	port := -1 // a port of the server's choosing
	if b.addr != "" {
		_, p, err := net.SplitHostPort(b.addr)
		if err != nil {
			return err
		}
		if port, err = strconv.Atoi(p); err != nil {
			return fmt.Errorf("nats address %s: %w", b.addr, err)
		}
	}
	srv, err := eventbus.StartEmbedded(eventbus.EmbeddedConfig{Host: "127.0.0.1", Port: port})
	if err != nil {
		return fmt.Errorf("nats on 127.0.0.1:%d: %w", port, err)
	}
	b.srv = srv
	b.addr = strings.TrimPrefix(srv.ClientURL(), "nats://")
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

// Watchhub is one watchhub of the cluster; it keeps its URL across restarts.
type Watchhub struct {
	Name    string
	URL     string
	cluster *Cluster

	mu       sync.Mutex
	hub      *watchhub.Hub
	reserved net.Listener // URL, bound before the cluster starts; served by the first start
}

// Hub is the running hub, or nil while it is stopped.
func (w *Watchhub) Hub() *watchhub.Hub {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hub
}

// Config is the hub's configuration: every member's storage, the cluster's bus.
func (w *Watchhub) Config() watchhub.Config {
	cfg := watchhub.Config{ListenURL: w.URL, NATSURL: w.cluster.bus.url(), SubjectPrefix: busPrefix,
		AdminAddr: "127.0.0.1:0", StoragePollInterval: 100 * time.Millisecond, SecretConfig: relayauth.SecretConfig{RelaySecret: RelaySecret}}
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
	deps := watchhub.Deps{Telemetry: w.cluster.opts.Telemetry, Logger: logger("watchhub", w.Name), Listener: w.reserved}
	w.reserved = nil // a restart binds URL again
	hub, err := watchhub.New(w.Config(), deps)
	if err == nil {
		err = hub.Start(context.Background())
	}
	if err != nil {
		if deps.Listener != nil {
			_ = deps.Listener.Close()
		}
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
