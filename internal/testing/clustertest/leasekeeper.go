package clustertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/leasekeeper"
	"github.com/cairn-kv/cairn/services/storage"
)

// busPrefix is the cluster's subject prefix on its embedded NATS.
const busPrefix = "testcluster"

// startBus starts the embedded NATS that carries the storages' applied records, on a loopback address it
// keeps across StopNATS and StartNATS; it stops after everything else when the test ends.
func (c *Cluster) startBus(t testing.TB) {
	c.bus = &bus{addr: loopbacktest.Addr(t)}
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

// busSink publishes one storage's applied records on the cluster's bus.
type busSink struct {
	nc        *nats.Conn
	publisher *eventbus.Publisher
	memberID  uint64
}

// newBusSink returns the sink for a member's storage, or nil when the cluster has no bus.
func (c *Cluster) newBusSink(memberID uint64, name string) (*busSink, error) {
	if c.bus == nil {
		return nil, nil
	}
	nc, err := eventbus.Connect(c.bus.url(), "storage-"+name, logger("eventbus", name))
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", name, err)
	}
	pub := eventbus.NewPublisher(nc, eventbus.PublisherConfig{SubjectPrefix: busPrefix, MemberID: memberID, TakeTurns: true, OnlyWhenWanted: true}, nil, logger("eventbus", name))
	pub.Start()
	return &busSink{nc: nc, publisher: pub, memberID: memberID}, nil
}

func (b *busSink) appliedSink() storage.AppliedSink {
	if b == nil {
		return nil
	}
	return storage.BusSink{Publisher: b.publisher, MemberID: b.memberID}
}

func (b *busSink) stop() {
	if b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	_ = b.publisher.Stop(ctx)
	b.nc.Close()
}

// Leasekeeper is one leasekeeper of the cluster, on the same URL across restarts.
type Leasekeeper struct {
	Name    string
	URL     string
	cluster *Cluster

	mu     sync.Mutex
	keeper *leasekeeper.Keeper
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
		SubjectPrefix: busPrefix}
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
	k, err := leasekeeper.New(l.Config(), l.cluster.opts.Telemetry, logger("leasekeeper", l.Name))
	if err != nil {
		return fmt.Errorf("leasekeeper %s: %w", l.Name, err)
	}
	if err := k.Start(context.Background()); err != nil {
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
