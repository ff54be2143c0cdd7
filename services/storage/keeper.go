package storage

import (
	"context"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// defaultLeaseRecordsPage bounds the records per LeaseRecords message.
const defaultLeaseRecordsPage = 1000

// KeeperStatus reports the leasekeeper claim, read linearizably.
func (s *Storage) KeeperStatus(ctx context.Context) (*storagepb.KeeperState, error) {
	if err := s.linearizeWithTimeout(ctx); err != nil {
		return nil, err
	}
	var state *storagepb.KeeperState
	err := s.withStore(func(st *mvcc.Store) (err error) { state, err = st.KeeperState(); return err })
	return state, err
}

// LeaseRecords sends every lease record, read linearizably at one applied index, in pages.
func (s *Storage) LeaseRecords(ctx context.Context, r *storagepb.LeaseRecordsRequest, send func(*storagepb.LeaseRecordsResponse) error) error {
	if err := s.linearizeWithTimeout(ctx); err != nil {
		return err
	}
	var records []*storagepb.LeaseRecord
	var applied uint64
	err := s.withStore(func(st *mvcc.Store) (err error) { records, applied, err = st.LeaseRecords(); return err })
	if err != nil {
		return err
	}
	page := int(r.GetPageSize())
	if page <= 0 {
		page = defaultLeaseRecordsPage
	}
	for start := 0; start == 0 || start < len(records); start += page {
		end := min(start+page, len(records))
		if err := send(&storagepb.LeaseRecordsResponse{Records: records[start:end], AppliedIndex: applied}); err != nil {
			return err
		}
	}
	return nil
}
