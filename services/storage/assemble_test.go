package storage

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/api/eventpb"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/storageclient"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestAssembleMember: Assemble takes the member's ID from its log, serves the listener it was given, publishes
// the applied lease changes on the bus, and stops once however often Stop is called.
func TestAssembleMember(t *testing.T) {
	bus, err := eventbus.StartEmbedded(eventbus.EmbeddedConfig{Host: "127.0.0.1", Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Shutdown()
	logger := slog.New(slog.DiscardHandler)
	subConn, err := eventbus.Connect(bus.ClientURL(), "test-sub", logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer subConn.Close()
	var leaseRecords atomic.Int64
	if _, err := eventbus.SubscribeLeaseChanges(subConn, "assembletest", func(rec *eventpb.AppliedRecord, _ eventbus.Meta) {
		if rec.GetMemberId() == 7 && len(rec.GetLeases()) > 0 {
			leaseRecords.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := subConn.Flush(); err != nil {
		t.Fatal(err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, 0) // the ID comes from the log
	m, err := Assemble(ctxT(t), cfg, Deps{Log: newMemlog(t, 7), Logger: logger, Listener: lis},
		Bus{NATSURL: bus.ClientURL(), SubjectPrefix: "assembletest"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if want := "http://" + lis.Addr().String(); m.URL() != want {
		t.Fatalf("URL() = %s, want the given listener's %s", m.URL(), want)
	}
	client, err := storageclient.Dial(m.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.LeaseGrant(ctxT(t), &pb.LeaseGrantRequest{ID: 5, TTL: 60}); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the lease grant on the bus", func() bool { return leaseRecords.Load() > 0 })

	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 2 {
		if err := m.Stop(stopCtx); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	if conn, err := net.DialTimeout("tcp", lis.Addr().String(), time.Second); err == nil {
		conn.Close()
		t.Fatal("the listener still accepts after Stop")
	}
}

func TestNewNeedsALog(t *testing.T) {
	if _, err := New(testConfig(t, 1), Deps{}); !errors.Is(err, ErrNoLog) {
		t.Fatalf("New without a log = %v, want ErrNoLog", err)
	}
	if _, err := Assemble(context.Background(), testConfig(t, 1), Deps{}, Bus{}); !errors.Is(err, ErrNoLog) {
		t.Fatalf("Assemble without a log = %v, want ErrNoLog", err)
	}
}

func TestStopTwice(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, second := m.Stop(ctx), m.Stop(ctx)
	if first != nil || second != nil {
		t.Fatalf("Stop twice = %v, %v; want nil, nil", first, second)
	}
}

// TestAssembleRefusedConfig: a configuration New refuses fails Assemble at once, leaving the bus it had joined
// (it used to wait forever for a publisher that never started).
func TestAssembleRefusedConfig(t *testing.T) {
	bus, err := eventbus.StartEmbedded(eventbus.EmbeddedConfig{Host: "127.0.0.1", Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Shutdown()
	cfg := testConfig(t, 7)
	cfg.AutoCompactionMode = "hourly"
	done := make(chan error, 1)
	go func() {
		_, err := Assemble(ctxT(t), cfg, Deps{Log: newMemlog(t, 7), Logger: slog.New(slog.DiscardHandler)},
			Bus{NATSURL: bus.ClientURL(), SubjectPrefix: "assembletest"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "--auto-compaction-mode") {
			t.Fatalf("Assemble with an unknown auto-compaction mode: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Assemble with a refused configuration did not return")
	}
}
