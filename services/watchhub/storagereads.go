package watchhub

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// newStoragePool is the hub's view of the storages it reads from: calls go to the preferred one and fail
// over to the others in turn when it does not answer (readFailsOver).
func newStoragePool(cfg Config, tel *obs.Telemetry, deps Deps) (*storageclient.Pool, error) {
	return storageclient.NewPool(storageclient.PoolConfig{Endpoints: cfg.StorageEndpoints,
		DialOptions: tel.DialOptions(), TLS: deps.Internal, CallTimeout: cfg.StorageTimeout, FailsOver: readFailsOver, Logger: deps.Logger})
}

// readFailsOver reports whether another storage might answer where this one failed: not for compaction
// (every storage agrees), nor when the caller gave up, nor once part of a history was handed on.
func readFailsOver(ctx context.Context, err error) bool {
	var handed *handedOnError
	if ctx.Err() != nil || storageclient.IsCompacted(err) || errors.As(err, &handed) {
		return false
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.Canceled:
		return false
	}
	return true
}

// handedOnError marks a history failure after a page was handed on (or the handler's own error): the
// caller resumes from what it got, so the read is not repeated on another storage.
type handedOnError struct{ err error }

func (e *handedOnError) Error() string { return e.err.Error() }
func (e *handedOnError) Unwrap() error { return e.err }

// history streams a history request from the first storage that answers. Once a page has been handed to each,
// a failure is returned as it is (the caller resumes from what it got); each's own errors are returned too.
// It returns the compact revision the storage reported.
func (h *Hub) history(ctx context.Context, req *storagepb.HistoryRequest,
	each func(*storagepb.HistoryResponse) error) (int64, error) {
	var compactRev int64
	err := h.pool.Do(ctx, func(ctx context.Context, c *storageclient.Client) error {
		delivered := false
		var eachErr error
		rev, err := c.History(ctx, req, func(page *storagepb.HistoryResponse) error {
			delivered = true
			eachErr = each(page)
			return eachErr
		})
		compactRev = rev
		switch {
		case eachErr != nil:
			return &handedOnError{eachErr}
		case err != nil && delivered:
			return &handedOnError{err}
		}
		return err
	})
	if handed, ok := errors.AsType[*handedOnError](err); ok {
		return compactRev, handed.err
	}
	return compactRev, err
}
