package storage

import (
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestCompactReporterSleepsAndWakes: once the log has the durable index the reporter's ticker stops (an idle
// storage does not wake for it), and the next durable index still reaches the log within a few ticks.
func TestCompactReporterSleepsAndWakes(t *testing.T) {
	log := newMemlog(t, 1)
	cfg := testConfig(t, 1)
	m := startMember(t, cfg, log, nil)
	ctx := ctxT(t)
	for round := range 3 {
		if _, err := m.client.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte{byte(round)}}); err != nil {
			t.Fatalf("put %d: %v", round, err)
		}
		applied := m.Storage.currentStore().Position().AppliedIndex
		waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the put durable", func() bool {
			return m.Storage.durable.Load() >= applied
		})
		durable := m.Storage.durable.Load()
		took := waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the durable index reported", func() bool {
			return log.Reported() >= durable
		})
		if limit := 10*cfg.LogCompactInterval + time.Second; took > limit {
			t.Fatalf("round %d: durable index %d reported after %v, want within %v", round, durable, took, limit)
		}
		// Idle for many ticks (the idleness is the subject): the reporter sleeps, and the next round must wake it.
		time.Sleep(5 * cfg.LogCompactInterval)
	}
}
