package storageclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/rpctune"
)

// CompactRevisionTrailer is the trailer in which History reports the compact revision when it fails with
// ErrGRPCCompacted.
const CompactRevisionTrailer = "cairn-compact-revision"

// Client talks to one storage.
type Client struct {
	conn *grpc.ClientConn
	rpc  storagepb.StorageClient
}

// Dial connects to the storage at target (http://host:port or host:port). opts are added to the defaults
// (insecure transport, no message size limit on receive); a tlsconfig.Link's DialOption among them makes the
// connection TLS.
func Dial(target string, opts ...grpc.DialOption) (*Client, error) {
	if u, err := url.Parse(target); err == nil && u.Scheme == "http" && u.Host != "" {
		target = u.Host
	}
	all := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<31 - 1))}, append(rpctune.DialOptions(), opts...)...)
	conn, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, fmt.Errorf("dial storage %s: %w", target, err)
	}
	return New(conn), nil
}

// New wraps an existing connection.
func New(conn *grpc.ClientConn) *Client {
	return &Client{conn: conn, rpc: storagepb.NewStorageClient(conn)}
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Submit sends a write request as is.
func (c *Client) Submit(ctx context.Context, req *pb.InternalRaftRequest) (*storagepb.SubmitResponse, error) {
	return c.rpc.Submit(ctx, &storagepb.SubmitRequest{Request: req})
}

// SubmitFenced sends a write request fenced by a leasekeeper epoch: storage refuses it with
// keeperclaim.ErrStaleEpoch unless the claim is still at keeperEpoch.
func (c *Client) SubmitFenced(ctx context.Context, req *pb.InternalRaftRequest, keeperEpoch uint64) (*storagepb.SubmitResponse, error) {
	return c.rpc.Submit(ctx, &storagepb.SubmitRequest{Request: req, KeeperEpoch: keeperEpoch})
}

// ClaimKeeper proposes a leasekeeper claim; it returns the state after it, or keeperclaim.ErrClaimConflict, and
// the log index of the claim entry.
func (c *Client) ClaimKeeper(ctx context.Context, claim *storagepb.KeeperClaim) (*storagepb.KeeperState, error) {
	resp, err := c.rpc.Submit(ctx, &storagepb.SubmitRequest{KeeperClaim: claim})
	return resp.GetKeeperClaim(), err
}

// KeeperStatus reads the leasekeeper claim linearizably.
func (c *Client) KeeperStatus(ctx context.Context) (*storagepb.KeeperState, error) {
	return c.rpc.KeeperStatus(ctx, &storagepb.KeeperStatusRequest{})
}

// LeaseRecords reads every lease record linearizably and returns them with the applied index they were read at.
func (c *Client) LeaseRecords(ctx context.Context) ([]*storagepb.LeaseRecord, uint64, error) {
	stream, err := c.rpc.LeaseRecords(ctx, &storagepb.LeaseRecordsRequest{})
	if err != nil {
		return nil, 0, err
	}
	var records []*storagepb.LeaseRecord
	var applied uint64
	for {
		page, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return records, applied, nil
		}
		if err != nil {
			return nil, 0, err
		}
		records, applied = append(records, page.Records...), page.AppliedIndex
	}
}

// Put writes a key.
func (c *Client) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	resp, err := c.Submit(ctx, &pb.InternalRaftRequest{Put: r})
	return resp.GetPut(), err
}

// DeleteRange deletes a key or range.
func (c *Client) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp, err := c.Submit(ctx, &pb.InternalRaftRequest{DeleteRange: r})
	return resp.GetDeleteRange(), err
}

// Txn runs a transaction (read-only ones are answered without the log).
func (c *Client) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	resp, err := c.Submit(ctx, &pb.InternalRaftRequest{Txn: r})
	return resp.GetTxn(), err
}

// Compact compacts the history up to r.Revision.
func (c *Client) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	resp, err := c.Submit(ctx, &pb.InternalRaftRequest{Compaction: r})
	return resp.GetCompaction(), err
}

// LeaseGrant grants a lease (storage picks the ID when r.ID is 0).
func (c *Client) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	resp, err := c.Submit(ctx, &pb.InternalRaftRequest{LeaseGrant: r})
	return resp.GetLeaseGrant(), err
}

// LeaseRevoke revokes a lease and deletes its keys.
func (c *Client) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	resp, err := c.Submit(ctx, &pb.InternalRaftRequest{LeaseRevoke: r})
	return resp.GetLeaseRevoke(), err
}

// LeaseCheckpoint records leases' remaining TTLs.
func (c *Client) LeaseCheckpoint(ctx context.Context, r *pb.LeaseCheckpointRequest) (*pb.LeaseCheckpointResponse, error) {
	resp, err := c.Submit(ctx, &pb.InternalRaftRequest{LeaseCheckpoint: r})
	return resp.GetLeaseCheckpoint(), err
}

// Alarm activates, deactivates (through the log) or lists (locally) alarms.
func (c *Client) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	resp, err := c.Submit(ctx, &pb.InternalRaftRequest{Alarm: r})
	return resp.GetAlarm(), err
}

// Range reads keys.
func (c *Client) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	return c.rpc.Range(ctx, r)
}

// History calls each with every page of events of r, in order. It returns the compact revision the storage
// reported: with a nil error, that of the last page; with ErrGRPCCompacted, the one from the trailer.
func (c *Client) History(ctx context.Context, r *storagepb.HistoryRequest, each func(*storagepb.HistoryResponse) error) (int64, error) {
	var trailer metadata.MD
	stream, err := c.rpc.History(ctx, r, grpc.Trailer(&trailer))
	if err != nil {
		return 0, err
	}
	var compactRev int64
	for {
		page, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return compactRev, nil
		}
		if err != nil {
			if v := trailer.Get(CompactRevisionTrailer); len(v) > 0 {
				compactRev, _ = strconv.ParseInt(v[0], 10, 64)
			}
			return compactRev, err
		}
		compactRev = page.CompactRevision
		if err := each(page); err != nil {
			return compactRev, err
		}
	}
}

// Hash returns the HashKV of the storage at rev (0: current).
func (c *Client) Hash(ctx context.Context, rev int64) (*pb.HashKVResponse, error) {
	return c.rpc.Hash(ctx, &pb.HashKVRequest{Revision: rev})
}

// BackendHash returns the storage's hash of its whole database (etcd's Maintenance.Hash), with the revision
// hashed in the header.
func (c *Client) BackendHash(ctx context.Context) (*pb.HashResponse, error) {
	return c.rpc.BackendHash(ctx, &pb.HashRequest{})
}

// Snapshot writes the storage's whole database to w, checks its SHA-256, and returns the first chunk's
// description (applied index, revision, size; no blob).
func (c *Client) Snapshot(ctx context.Context, w io.Writer) (*storagepb.SnapshotChunk, error) {
	var info *storagepb.SnapshotChunk
	var written uint64
	err := c.SnapshotChunks(ctx, func(chunk *storagepb.SnapshotChunk) error {
		if info == nil {
			info = &storagepb.SnapshotChunk{AppliedIndex: chunk.AppliedIndex, Revision: chunk.Revision, TotalSize: chunk.TotalSize}
		}
		if _, err := w.Write(chunk.Blob); err != nil {
			return fmt.Errorf("write snapshot at offset %d: %w", written, err)
		}
		written += uint64(len(chunk.Blob))
		return nil
	})
	return info, err
}

// SnapshotChunks calls each with every chunk of the storage's database, in order. The SHA-256 and size are
// checked before the last chunk (the one carrying the checksum) is handed over, so a corrupt or truncated
// stream ends with an error instead of its last chunk.
func (c *Client) SnapshotChunks(ctx context.Context, each func(*storagepb.SnapshotChunk) error) error {
	stream, err := c.rpc.Snapshot(ctx, &storagepb.SnapshotRequest{})
	if err != nil {
		return err
	}
	sum := sha256.New()
	var total, received uint64
	for first := true; ; first = false {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("snapshot stream ended without a checksum after %d bytes", received)
		}
		if err != nil {
			return err
		}
		if first {
			total = chunk.TotalSize
		}
		sum.Write(chunk.Blob)
		received += uint64(len(chunk.Blob))
		if chunk.Sha256 != nil && (!bytes.Equal(chunk.Sha256, sum.Sum(nil)) || received != total) {
			return fmt.Errorf("snapshot corrupt: %d bytes of %d, checksum mismatch", received, total)
		}
		if err := each(chunk); err != nil {
			return err
		}
		if chunk.Sha256 != nil {
			return nil
		}
	}
}

// AuthState reads the whole auth store (users, roles, enabled flag, auth revision), linearizably unless
// serializable.
func (c *Client) AuthState(ctx context.Context, serializable bool) (*storagepb.AuthStateResponse, error) {
	return c.rpc.AuthState(ctx, &storagepb.AuthStateRequest{Serializable: serializable})
}

// AuthToken looks up a simple auth token any frontend issued; ttl is how long it may go unused.
func (c *Client) AuthToken(ctx context.Context, token string, ttl time.Duration) (*storagepb.AuthTokenResponse, error) {
	return c.rpc.AuthToken(ctx, &storagepb.AuthTokenRequest{Token: token, TtlSeconds: uint64(ttl / time.Second)})
}

// Status reports the storage's position and health.
func (c *Client) Status(ctx context.Context) (*storagepb.StatusResponse, error) {
	return c.rpc.Status(ctx, &storagepb.StatusRequest{})
}

// Defragment rewrites the storage's database compactly and returns its new size.
func (c *Client) Defragment(ctx context.Context) (*storagepb.DefragmentResponse, error) {
	return c.rpc.Defragment(ctx, &storagepb.DefragmentRequest{})
}

// LeaseTimeToLive reports a lease as storage knows it.
func (c *Client) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return c.rpc.LeaseTimeToLive(ctx, r)
}

// LeaseLeases lists every lease.
func (c *Client) LeaseLeases(ctx context.Context) (*pb.LeaseLeasesResponse, error) {
	return c.rpc.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
}

// IsCompacted reports whether err is etcd's ErrGRPCCompacted.
func IsCompacted(err error) bool {
	return rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCCompacted)
}
