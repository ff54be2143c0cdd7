package clustertest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/leasekeeper"
	"github.com/cairn-kv/cairn/services/storage"
)

// busPrefix is the cluster's subject prefix on its embedded NATS.
const busPrefix = "testcluster"

// startBus starts the embedded NATS that carries the storages' applied records, on a loopback address it
// keeps across StopNATS and StartNATS; it stops after everything else when the test ends.
func (c *Cluster) startBus(t testing.TB) {
	c.bus = &bus{}
	if err := c.bus.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.bus.stop)
}

// BusURL is the embedded NATS's URL ("" without leasekeepers and watchhubs).
func (c *Cluster) BusURL() string {
	if c.bus == nil {
		return ""
	}
	return c.bus.url()
}

// storageBus is where the members' storages publish: the cluster's bus, or none without one.
func (c *Cluster) storageBus() storage.Bus {
	if c.bus == nil {
		return storage.Bus{}
	}
	return storage.Bus{NATSURL: c.bus.url(), SubjectPrefix: busPrefix}
}

// Leasekeeper is one leasekeeper of the cluster, on the same URL across restarts.
type Leasekeeper struct {
	Name    string
	URL     string
	cluster *Cluster

	mu       sync.Mutex
	keeper   *leasekeeper.Keeper
	reserved net.Listener // URL, bound before the cluster starts; served by the first start
}

// Leasekeepers returns every leasekeeper.
func (c *Cluster) Leasekeepers() []*Leasekeeper { return c.keepers }

// LeasekeeperURLs returns every leasekeeper's URL (the frontends' --lease-endpoints).
func (c *Cluster) LeasekeeperURLs() []string {
	var urls []string
	for _, k := range c.keepers {
		urls = append(urls, k.URL)
	}
	return urls
}

// ActiveLeasekeeper waits until one leasekeeper is active and returns it.
func (c *Cluster) ActiveLeasekeeper(timeout time.Duration) *Leasekeeper {
	c.t.Helper()
	var active *Leasekeeper
	waittest.Until(c.t, timeout, 5*time.Millisecond, "an active leasekeeper", func() bool {
		for _, k := range c.keepers {
			if kp := k.Keeper(); kp != nil && kp.Active() {
				active = k
				return true
			}
		}
		return false
	})
	return active
}

// Keeper is the running keeper, or nil while it is stopped.
func (l *Leasekeeper) Keeper() *leasekeeper.Keeper {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keeper
}

// Config is the keeper's configuration: every member's storage (its own order per keeper), the cluster's bus.
func (l *Leasekeeper) Config() leasekeeper.Config {
	var storages []string
	for _, m := range l.cluster.members {
		storages = append(storages, m.StorageURL)
	}
	cfg := leasekeeper.Config{Name: l.Name, ListenURL: l.URL, StorageEndpoints: storages, NATSURL: l.cluster.bus.url(),
		SubjectPrefix: busPrefix, SecretConfig: relayauth.SecretConfig{RelaySecret: RelaySecret}, PeerURLs: l.cluster.LeasekeeperURLs()}
	if l.cluster.opts.ConfigureLeasekeeper != nil {
		l.cluster.opts.ConfigureLeasekeeper(&cfg)
	}
	return cfg
}

// Start starts the keeper (a new claimant each time).
func (l *Leasekeeper) Start() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keeper != nil {
		return fmt.Errorf("leasekeeper %s already running", l.Name)
	}
	deps := leasekeeper.Deps{Telemetry: l.cluster.opts.Telemetry, Logger: logger("leasekeeper", l.Name), Listener: l.reserved}
	l.reserved = nil // a restart binds URL again
	k, err := leasekeeper.New(l.Config(), deps)
	if err == nil {
		err = k.Start(context.Background())
	}
	if err != nil {
		if deps.Listener != nil {
			_ = deps.Listener.Close()
		}
		return fmt.Errorf("leasekeeper %s: %w", l.Name, err)
	}
	l.keeper = k
	return nil
}

// Stop stops the keeper cleanly: an active keeper releases its claim (a no-op when it is stopped).
func (l *Leasekeeper) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keeper == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	_ = l.keeper.Stop(ctx)
	l.keeper = nil
}

// Crash stops the keeper as a crash would: it keeps its claim until a standby's takeover timeout.
func (l *Leasekeeper) Crash() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keeper == nil {
		return
	}
	l.keeper.Crash()
	l.keeper = nil
}
