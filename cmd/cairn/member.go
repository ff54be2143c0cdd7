package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/services/storage"
)

// memberStorage is a running storage with what feeds its applied records to NATS; `cairn storage` and
// `cairn dev` start it the same way.
type memberStorage struct {
	storage   *storage.Storage
	publisher *eventbus.Publisher
	bus       *nats.Conn
}

// startMemberStorage takes the member's ID from its consensus (retrying until consensus answers), connects
// the applied-record publisher when natsURL is set, and starts the storage over log.
func startMemberStorage(ctx context.Context, proc *process, cfg storage.Config, log commitlog.Log, natsURL string) (*memberStorage, error) {
	memberID, err := consensusMemberID(ctx, proc, log)
	if err != nil {
		return nil, err
	}
	cfg.MemberID, cfg.Registry = memberID, proc.registry
	m := &memberStorage{}
	var sink storage.AppliedSink
	if natsURL != "" {
		if m.bus, err = eventbus.Connect(natsURL, fmt.Sprintf("cairn-storage-%x", memberID), proc.logger); err != nil {
			return nil, err
		}
		m.publisher = eventbus.NewPublisher(m.bus, eventbus.PublisherConfig{MemberID: memberID, TakeTurns: true, OnlyWhenWanted: true}, proc.registry, proc.logger)
		m.publisher.Start()
		sink = storage.BusSink{Publisher: m.publisher, MemberID: memberID}
	}
	if m.storage, err = storage.New(cfg, log, sink, proc.telemetry, proc.logger); err != nil {
		m.stopBus(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := m.storage.Start(ctx); err != nil {
		_ = m.stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return m, nil
}

// stop stops the storage, then sends what the publisher still holds.
func (m *memberStorage) stop(ctx context.Context) error {
	err := m.storage.Stop(ctx)
	m.stopBus(ctx)
	return err
}

func (m *memberStorage) stopBus(ctx context.Context) {
	if m.publisher != nil {
		_ = m.publisher.Stop(ctx)
	}
	if m.bus != nil {
		m.bus.Close()
	}
}

// consensusMemberID asks the member's consensus for its ID until it answers: storage shares its member's ID
// (request IDs and alarms carry it), and consensus may still be starting.
func consensusMemberID(ctx context.Context, proc *process, log commitlog.Log) (uint64, error) {
	const retry = 200 * time.Millisecond
	lastLogged := time.Time{}
	for {
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		status, err := log.Status(callCtx)
		cancel()
		if err == nil && status.MemberID != 0 {
			proc.logger.Info("member identified by its consensus", "member-id", fmt.Sprintf("%x", status.MemberID))
			return status.MemberID, nil
		}
		if err == nil {
			err = errors.New("consensus reported member ID 0")
		}
		if time.Since(lastLogged) > 5*time.Second {
			proc.logger.Warn("waiting for this member's consensus to answer", "err", err)
			lastLogged = time.Now()
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for the member ID from consensus: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(retry):
		}
	}
}
