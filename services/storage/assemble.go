package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/eventbus"
)

// Bus says where a member's storage publishes its applied records; a zero Bus publishes nothing.
type Bus struct {
	// NATSURL is the event bus (comma-separated for a NATS cluster); empty: no bus.
	NATSURL string
	// SubjectPrefix is the cluster's subject prefix (eventbus.DefaultSubjectPrefix when empty).
	SubjectPrefix string
	// NkeySeedFile holds the storage's nkey seed on a bus locked down with role nkeys; empty: none.
	NkeySeedFile string
}

// Member is a member's storage with what feeds its applied records to the event bus. Assemble builds it;
// `cairn storage`, `cairn dev` and the test clusters all build a member's storage this way.
type Member struct {
	*Storage
	publisher *eventbus.Publisher
	nc        *nats.Conn

	stopOnce sync.Once
	stopErr  error
}

// Assemble builds a member's storage over deps.Log. A zero cfg.MemberID is asked of the log (retrying until
// the member's consensus answers, or ctx ends): a storage shares its member's ID. With bus.NATSURL set, every
// applied record is published there (deps.Sink is then unused), the members' publishers taking turns and
// sending applied records only while a watchhub wants them. Nothing runs until Start.
func Assemble(ctx context.Context, cfg Config, deps Deps, bus Bus) (*Member, error) {
	if deps.Log == nil {
		return nil, ErrNoLog
	}
	deps = deps.withDefaults()
	if cfg.MemberID == 0 {
		memberID, err := memberIDOf(ctx, deps.Log, deps)
		if err != nil {
			return nil, err
		}
		cfg.MemberID = memberID
	}
	m := &Member{}
	if bus.NATSURL != "" {
		// NoEcho: the publisher hears the other members' heartbeats, never needs its own (5 a second back).
		nc, err := eventbus.Connect(bus.NATSURL, fmt.Sprintf("cairn-storage-%x", cfg.MemberID), deps.Logger, deps.Internal,
			eventbus.NkeySeedFile(bus.NkeySeedFile), nats.NoEcho())
		if err != nil {
			return nil, fmt.Errorf("storage of member %x: %w", cfg.MemberID, err)
		}
		var reg prometheus.Registerer
		if deps.Registry != nil { // a nil *Registry must not become a non-nil Registerer
			reg = deps.Registry
		}
		m.nc = nc
		m.publisher = eventbus.NewPublisher(nc, eventbus.PublisherConfig{SubjectPrefix: bus.SubjectPrefix,
			MemberID: cfg.MemberID, TakeTurns: true, OnlyWhenWanted: true}, reg, deps.Logger)
		deps.Sink = BusSink{Publisher: m.publisher, MemberID: cfg.MemberID}
	}
	st, err := New(cfg, deps)
	if err != nil {
		if m.nc != nil {
			m.nc.Close() // the publisher never started: its Stop would wait for a goroutine that never ran
		}
		return nil, err
	}
	m.Storage = st
	return m, nil
}

// Start starts the publisher, then the storage.
func (m *Member) Start(ctx context.Context) error {
	if m.publisher != nil {
		m.publisher.Start()
	}
	if err := m.Storage.Start(ctx); err != nil {
		_ = m.Stop(context.WithoutCancel(ctx))
		return err
	}
	return nil
}

// Stop stops the storage, then sends what the publisher still holds and leaves the bus. It is safe to call
// more than once.
func (m *Member) Stop(ctx context.Context) error {
	m.stopOnce.Do(func() {
		m.stopErr = m.Storage.Stop(ctx)
		m.closeBus(ctx)
	})
	return m.stopErr
}

func (m *Member) closeBus(ctx context.Context) {
	if m.publisher != nil {
		_ = m.publisher.Stop(ctx)
	}
	if m.nc != nil {
		m.nc.Close()
	}
}

// memberIDRetry is how often Assemble asks a consensus that has not answered yet for the member's ID.
const memberIDRetry = 200 * time.Millisecond

// memberIDOf asks the member's consensus for its ID until it answers (consensus may still be starting).
func memberIDOf(ctx context.Context, log commitlog.Log, deps Deps) (uint64, error) {
	var lastLogged time.Time
	for {
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		status, err := log.Status(callCtx)
		cancel()
		if err == nil && status.MemberID != 0 {
			deps.Logger.Info("member identified by its consensus", "member-id", fmt.Sprintf("%x", status.MemberID))
			return status.MemberID, nil
		}
		if err == nil {
			err = errors.New("consensus reported member ID 0")
		}
		if time.Since(lastLogged) > 5*time.Second {
			deps.Logger.Warn("waiting for this member's consensus to answer", "err", err)
			lastLogged = time.Now()
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for the member ID from consensus: %w (last error: %w)", ctx.Err(), err)
		case <-time.After(memberIDRetry):
		}
	}
}
