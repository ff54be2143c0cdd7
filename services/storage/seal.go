package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// Sealed values (Deps.Keyring): a write's values are sealed here, before the entry is proposed, so the log, its
// snapshots, bbolt, storage snapshots and the bus records hold only ciphertext, and every member stores the same
// bytes (hashes agree). A value is opened where it leaves storage: by mvcc for ranges and value compares (see
// mvcc.Config.Opener), here for the prev_kvs a write returns and the events History serves. The bus records
// stay sealed; the watchhubs hold the keyring and open them.

// sealRequest returns req with its values sealed: a put's value, a txn's put values and value compares (a
// compare's value is the client's guess at a stored value, plaintext as secret as the value). req itself is not
// changed: a caller may send it again elsewhere. Without a keyring, or with nothing to seal, it returns req.
func (s *Storage) sealRequest(ctx context.Context, req *pb.InternalRaftRequest) (*pb.InternalRaftRequest, error) {
	if s.keyring == nil || (req.Put == nil && req.Txn == nil) {
		return req, nil
	}
	sealed := proto.Clone(req).(*pb.InternalRaftRequest)
	var err error
	if sealed.Put != nil {
		sealed.Put.Value, err = s.keyring.Seal(ctx, sealed.Put.Key, sealed.Put.Value)
	} else {
		err = s.sealTxn(ctx, sealed.Txn)
	}
	if err != nil {
		return nil, sealError(err)
	}
	return sealed, nil
}

func (s *Storage) sealTxn(ctx context.Context, txn *pb.TxnRequest) error {
	for _, c := range txn.Compare {
		if c.Target != pb.Compare_VALUE {
			continue
		}
		value, err := s.keyring.Seal(ctx, c.Key, c.GetValue())
		if err != nil {
			return err
		}
		c.TargetUnion = &pb.Compare_Value{Value: value}
	}
	for _, ops := range [][]*pb.RequestOp{txn.Success, txn.Failure} {
		for _, op := range ops {
			switch {
			case op.GetRequestPut() != nil:
				put := op.GetRequestPut()
				value, err := s.keyring.Seal(ctx, put.Key, put.Value)
				if err != nil {
					return err
				}
				put.Value = value
			case op.GetRequestTxn() != nil:
				if err := s.sealTxn(ctx, op.GetRequestTxn()); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// openResponse opens the prev_kvs of an applied write's response (ranges inside a txn were opened by mvcc). The
// stored KeyValues are shared with the applied events, which must stay sealed, so each is copied.
func (s *Storage) openResponse(ctx context.Context, resp any) error {
	if s.keyring == nil {
		return nil
	}
	switch r := resp.(type) {
	case *pb.PutResponse:
		kv, err := s.openKV(ctx, r.PrevKv)
		r.PrevKv = kv
		return err
	case *pb.DeleteRangeResponse:
		return s.openKVs(ctx, r.PrevKvs)
	case *pb.TxnResponse:
		for _, op := range r.Responses {
			var err error
			switch {
			case op.GetResponsePut() != nil:
				err = s.openResponse(ctx, op.GetResponsePut())
			case op.GetResponseDeleteRange() != nil:
				err = s.openResponse(ctx, op.GetResponseDeleteRange())
			case op.GetResponseTxn() != nil:
				err = s.openResponse(ctx, op.GetResponseTxn())
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Storage) openKVs(ctx context.Context, kvs []*mvccpb.KeyValue) error {
	for i, kv := range kvs {
		opened, err := s.openKV(ctx, kv)
		if err != nil {
			return err
		}
		kvs[i] = opened
	}
	return nil
}

// openKV returns a copy of kv with its value opened (nil for nil).
func (s *Storage) openKV(ctx context.Context, kv *mvccpb.KeyValue) (*mvccpb.KeyValue, error) {
	if kv == nil || s.keyring == nil {
		return kv, nil
	}
	plain, err := s.keyring.Open(ctx, kv.Key, kv.Value)
	if err != nil {
		s.sealFailed(err)
		return nil, sealError(err)
	}
	return &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
		Version: kv.Version, Value: plain, Lease: kv.Lease}, nil
}

// openEvents opens the values of History's events, each in a new Event.
func (s *Storage) openEvents(ctx context.Context, events []*mvccpb.Event) error {
	if s.keyring == nil {
		return nil
	}
	for i, ev := range events {
		opened := &mvccpb.Event{Type: ev.Type}
		var err error
		if opened.Kv, err = s.openKV(ctx, ev.Kv); err != nil {
			return err
		}
		if ev.Type == mvccpb.Event_DELETE {
			opened.Kv = ev.Kv // a tombstone has no value
		}
		if opened.PrevKv, err = s.openKV(ctx, ev.PrevKv); err != nil {
			return err
		}
		events[i] = opened
	}
	return nil
}

// valueOpener is mvcc.Config.Opener: the store's ranges and compares open values with the keyring.
type valueOpener struct{ s *Storage }

func (o valueOpener) AppendOpen(dst, key, stored []byte) ([]byte, error) {
	plain, err := o.s.keyring.AppendOpen(context.Background(), dst, key, stored)
	if err != nil {
		o.s.sealFailed(err)
	}
	return plain, err
}

func (o valueOpener) OpenedLen(key, stored []byte) (int, error) {
	n, err := seal.OpenedLen(stored)
	if err != nil {
		err = fmt.Errorf("open value of key %q: %w", key, err)
		o.s.sealFailed(err)
	}
	return n, err
}

// sealFailed counts a value that did not open and logs what an operator must act on: a value that fails
// authentication was tampered with (or a key's secret changed) and is never returned.
func (s *Storage) sealFailed(err error) {
	reason := "other"
	switch {
	case errors.Is(err, seal.ErrAuthFailed):
		reason = "auth_failed"
		s.logger.Error("ALARM: a sealed value failed authentication (tampered data or a changed key secret); it is not served; raising CORRUPT", "err", err)
		s.alarms.raise(s.cfg.MemberID)
	case errors.Is(err, seal.ErrUnavailable):
		reason = "unavailable"
	case errors.Is(err, seal.ErrUnknownKey), errors.Is(err, seal.ErrNotSealed):
		reason = "unknown_key"
		s.logger.Error("a stored value cannot be opened with the configured keys", "err", err)
	}
	s.metrics.sealFailures.WithLabelValues(reason).Inc()
}

// sealError maps a seal failure to the gRPC error a client sees: Unavailable (retry) when a provider did not
// answer, DataLoss when a value failed authentication, FailedPrecondition when the keys configured cannot open it.
func sealError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, seal.ErrUnavailable):
		return status.Error(codes.Unavailable, "cairn storage: "+err.Error())
	case errors.Is(err, seal.ErrAuthFailed), errors.Is(err, seal.ErrMalformed):
		return status.Error(codes.DataLoss, "cairn storage: "+err.Error())
	case errors.Is(err, seal.ErrUnknownKey), errors.Is(err, seal.ErrNotSealed):
		return status.Error(codes.FailedPrecondition, "cairn storage: "+err.Error())
	}
	return err
}

// checkNoSealedValues refuses a start without an encryption configuration on a store whose newest values are
// sealed: they would be served as ciphertext.
func checkNoSealedValues(path string) error {
	checked := 0
	err := mvcc.ScanValues(path, true, func(kv *mvccpb.KeyValue) error {
		if seal.IsSealed(kv.Value) {
			ref := seal.RefOf(kv.Value)
			return fmt.Errorf("%w: the stored values are sealed (%s key %q) and no encryption configuration was given "+
				"(--encryption-config)", seal.ErrUnknownKey, ref.Provider, ref.KeyID)
		}
		if checked++; checked == sampleValues {
			return mvcc.ErrStopScan
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storage %s: %w", path, err)
	}
	return nil
}

// sampleValues is how many stored values checkKeyring opens at start.
const sampleValues = 64

// checkKeyring reads the database at path read-only before storage opens it: every stored value's header must
// name a provider and key the configuration has (a plain value counts as identity unless its key is in no
// resource) (so removing a key that still seals values refuses the start),
// and the newest sampleValues values must open (so a wrong secret or a missing plugin refuses it too). A refused
// start changes nothing on disk and says why.
func checkKeyring(path string, keyring *seal.Keyring, logger *slog.Logger) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if keyring == nil {
		return checkNoSealedValues(path)
	}
	census := seal.Census{}
	opened := 0
	err := mvcc.ScanValues(path, true, func(kv *mvccpb.KeyValue) error {
		if !seal.IsSealed(kv.Value) && !keyring.Covers(kv.Key) {
			return nil // a key in no resource: plain by design, with or without identity in the file
		}
		census.Add(kv.Value)
		if opened < sampleValues {
			opened++
			if _, err := keyring.Open(context.Background(), kv.Key, kv.Value); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		if missing := keyring.Missing(census); len(missing) > 0 {
			err = fmt.Errorf("%w: %d stored values are sealed with %v, which the configuration no longer has "+
				"(rewrap them with `cairn encryption rewrap` and compact before removing a key)",
				seal.ErrUnknownKey, census[missing[0]], missing)
		}
	}
	if err != nil {
		return fmt.Errorf("storage %s: the encryption configuration cannot open the stored values: %w", path, err)
	}
	for _, ref := range census.Refs() {
		logger.Info("stored values by key", "provider", ref.Provider, "key", ref.KeyID, "values", census[ref])
	}
	return nil
}
