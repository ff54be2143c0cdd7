package storage

import (
	"github.com/cairn-kv/cairn/api/eventpb"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// BusSink is the AppliedSink that publishes every record on the event bus, for watchhubs and leasekeepers.
type BusSink struct {
	Publisher *eventbus.Publisher
	MemberID  uint64
}

// Applied queues rec on the bus; it never blocks (see eventbus.Publisher).
func (b BusSink) Applied(rec AppliedRecord) {
	b.Publisher.Publish(RecordProto(b.MemberID, rec), rec.Trace)
}

// RecordProto is rec as the bus carries it.
func RecordProto(memberID uint64, rec AppliedRecord) *eventpb.AppliedRecord {
	out := &eventpb.AppliedRecord{
		MemberId:        memberID,
		Index:           rec.Index,
		Term:            rec.Term,
		Revision:        rec.Revision,
		Events:          rec.Events,
		CompactRevision: rec.CompactRevision,
		AlarmsChanged:   rec.Alarms != nil,
		Alarms:          rec.Alarms,
	}
	for _, lc := range rec.Leases {
		out.Leases = append(out.Leases, &eventpb.LeaseChange{
			Type: leaseChangeType(lc.Type), Id: lc.ID, Ttl: lc.TTL, RemainingTtl: lc.RemainingTTL,
		})
	}
	return out
}

func leaseChangeType(t mvcc.LeaseChangeType) eventpb.LeaseChange_Type {
	switch t {
	case mvcc.LeaseGranted:
		return eventpb.LeaseChange_GRANTED
	case mvcc.LeaseRevoked:
		return eventpb.LeaseChange_REVOKED
	case mvcc.LeaseCheckpointed:
		return eventpb.LeaseChange_CHECKPOINTED
	}
	return eventpb.LeaseChange_UNKNOWN
}
