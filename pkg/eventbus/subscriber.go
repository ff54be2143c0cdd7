package eventbus

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/pkg/cairnpb/eventpb"
)

// Handler receives each record as it arrives, from one goroutine per subscription, in arrival order.
type Handler func(rec *eventpb.AppliedRecord, meta Meta)

// Subscribe delivers every member's records under prefix to handle until the subscription is unsubscribed.
// Records that do not decode are skipped (and counted in Subscription.Dropped). NATS drops messages for a
// handler that falls too far behind (a slow consumer): the caller must treat the bus as lossy.
func Subscribe(nc *nats.Conn, prefix string, handle Handler) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(AllSubjects(prefix), func(msg *nats.Msg) {
		var rec eventpb.AppliedRecord
		if err := proto.Unmarshal(msg.Data, &rec); err != nil {
			return
		}
		handle(&rec, metaOf(msg.Header))
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", AllSubjects(prefix), err)
	}
	// Generous pending limits: a hub catching up briefly should not be cut off; beyond them NATS drops.
	if err := sub.SetPendingLimits(1<<20, 1<<30); err != nil {
		return nil, fmt.Errorf("pending limits for %s: %w", AllSubjects(prefix), err)
	}
	return sub, nil
}
