package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/pkg/cairnpb/eventpb"
	"github.com/cairn-kv/cairn/pkg/eventbus"
)

// testAppliedRecordsOnNATS checks the storage → NATS wiring of `cairn up`: every member's storage publishes
// the records it applies on the stack's NATS, the feed watchhubs and leasekeepers will follow.
func testAppliedRecordsOnNATS(t *testing.T, s *upStack) {
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", s.child(t, "nats").Ports["client"])
	nc, err := eventbus.Connect(natsURL, "e2e", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const key = "bus/key"
	var mu sync.Mutex
	publishers := map[uint64]int64{} // member → revision of the record carrying key
	sub, err := eventbus.Subscribe(nc, "", func(rec *eventpb.AppliedRecord, _ eventbus.Meta) {
		for _, ev := range rec.GetEvents() {
			if string(ev.GetKv().GetKey()) == key {
				mu.Lock()
				publishers[rec.GetMemberId()] = rec.GetRevision()
				mu.Unlock()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	put, err := s.client(t).Put(ctx, key, "on the bus")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the put's record from every member", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(publishers) == 3
	})
	for member, rev := range publishers {
		if rev != put.Header.Revision {
			t.Errorf("member %x published the put at revision %d, the put was at %d", member, rev, put.Header.Revision)
		}
	}
}
