package storage

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/commitlog/commitlogtest"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// testMember is a running storage on loopback with its log and a client of its gRPC API.
type testMember struct {
	*Storage
	log    commitlog.Log
	client *storageclient.Client
	sink   *MemorySink
}

func testConfig(t testing.TB, memberID uint64) Config {
	return Config{MemberID: memberID, DataDir: t.TempDir(), ListenURL: "http://127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		BatchInterval: 10 * time.Millisecond, RequestTimeout: 5 * time.Second, LogCompactInterval: 20 * time.Millisecond}
}

func newMemlog(t testing.TB, memberID uint64) *commitlogtest.Log {
	l, err := commitlogtest.Open(commitlogtest.Config{MemberID: memberID})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func startMember(t testing.TB, cfg Config, log commitlog.Log, tel *obs.Telemetry) *testMember {
	t.Helper()
	return startMemberWith(t, cfg, Deps{Log: log, Telemetry: tel})
}

// startMemberWith is startMember with deps (a memory sink and a silent logger are added).
func startMemberWith(t testing.TB, cfg Config, deps Deps) *testMember {
	t.Helper()
	sink := NewMemorySink()
	deps.Sink, deps.Logger = sink, slog.New(slog.DiscardHandler)
	log := deps.Log
	s, err := New(cfg, deps)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	client, err := storageclient.Dial(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return &testMember{Storage: s, log: log, client: client, sink: sink}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
