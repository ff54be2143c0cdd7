package watchhub

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Sealed values: the storages publish their applied records with values sealed as stored (see internal/seal), so
// the bus carries no plaintext; a hub holds the same keyring as the storages (Deps.Keyring) and opens the values
// of a bus record before it enters the sequencer. A record that does not open (a KMS plugin not answering) is
// dropped: its revision becomes a gap that is filled from storage's History, which storage serves opened, so a
// watcher is late rather than wrong. History needs nothing here.

// openBusEvents opens the values of a bus record's events in place (the record was decoded for this hub alone).
func (f *feed) openBusEvents(events []*mvccpb.Event) error {
	keyring := f.hub.deps.Keyring
	if keyring == nil {
		return nil
	}
	for _, ev := range events {
		for _, kv := range []*mvccpb.KeyValue{ev.Kv, ev.PrevKv} {
			if kv == nil || (kv == ev.Kv && ev.Type == mvccpb.Event_DELETE) {
				continue
			}
			plain, err := keyring.Open(context.Background(), kv.Key, kv.Value)
			if err != nil {
				return err
			}
			kv.Value = plain
		}
	}
	return nil
}
