package frontend

import (
	"bytes"
	"context"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/etcdcheck"
)

// initialStreamChunkLimit is the key count of RangeStream's first chunk, as in etcd.
const initialStreamChunkLimit = 10

// RangeStream is etcd 3.7's KV.RangeStream: the result of Range sent in chunks of keys, pinned to the
// revision of the first chunk; header, more and count are set on the last chunk only. Every chunk is read from
// the storage that answered the first (which has applied the pinned revision); only the first may be tried
// on another storage.
func (s *kvServer) RangeStream(r *pb.RangeRequest, stream pb.KV_RangeStreamServer) error {
	if err := checkRangeStream(r); err != nil {
		return err
	}
	ctx := stream.Context()
	q := &pb.RangeRequest{Key: r.Key, RangeEnd: r.RangeEnd, Revision: r.Revision, Serializable: r.Serializable,
		KeysOnly: r.KeysOnly, CountOnly: r.CountOnly}
	totalLimit := r.Limit
	if totalLimit == 0 {
		totalLimit = math.MaxInt64
	}
	if !r.CountOnly {
		q.Limit = min(initialStreamChunkLimit, totalLimit)
	}
	// The first chunk is read on the pipeline, fenced by the auth revision it was checked at (fencedRead);
	// later ones read the revision it pinned.
	var first *pb.RangeResponse
	v, served, err := s.readRange(ctx, r, func(ctx context.Context, rep *storageReplica, authFence uint64) error {
		ctx, cancel := context.WithTimeout(ctx, s.f.cfg.RequestTimeout)
		defer cancel()
		var err error
		first, err = rep.kv().Range(ctx, q, authFence)
		return err
	})
	if err != nil {
		return err
	}
	header := &pb.ResponseHeader{Revision: first.Header.GetRevision(), RaftTerm: first.Header.GetRaftTerm()}
	v.fillHeader(header, served)
	if r.CountOnly {
		return stream.Send(&pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{Header: header, Count: first.Count}})
	}
	if q.Revision == 0 {
		q.Revision = header.Revision
	}
	q.Serializable = true // later chunks read the pinned revision from the storage that has it
	total := first.Count  // Range counts the whole range at the revision, whatever the limit
	resp, sent := first, int64(0)
	for {
		sent += int64(len(resp.Kvs))
		out := &pb.RangeResponse{Kvs: resp.Kvs}
		done := !resp.More || sent == totalLimit
		if done {
			out.Header, out.More, out.Count = header, resp.More, total
		}
		if err := stream.Send(&pb.RangeStreamResponse{RangeResponse: out}); err != nil {
			return err
		}
		if done {
			return nil
		}
		q.Key = append(bytes.Clone(resp.Kvs[len(resp.Kvs)-1].Key), 0)
		q.Limit = min(adjustChunkLimit(q.Limit, proto.Size(resp), int(s.f.cfg.MaxRequestBytes)), totalLimit-sent)
		if resp, err = s.rangeChunk(ctx, served, q); err != nil {
			return replyError(ctx, err)
		}
	}
}

func (s *kvServer) rangeChunk(ctx context.Context, rep *storageReplica, q *pb.RangeRequest) (*pb.RangeResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.f.cfg.RequestTimeout)
	defer cancel()
	return rep.client().Range(ctx, q)
}

// checkRangeStream is etcd's check: a Range request without custom sorting or revision filters.
func checkRangeStream(r *pb.RangeRequest) error {
	if err := etcdcheck.Range(r); err != nil {
		return err
	}
	if r.SortOrder != pb.RangeRequest_NONE && !(r.SortTarget == pb.RangeRequest_KEY && r.SortOrder == pb.RangeRequest_ASCEND) {
		return status.Errorf(codes.Unimplemented, "RangeStream does not support custom sort orders")
	}
	if r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0 {
		return status.Errorf(codes.Unimplemented, "RangeStream does not support revision filters")
	}
	return nil
}

// adjustChunkLimit is etcd's: double the next chunk's key count when the last chunk was under half the
// target size, halve it when over twice, never below 1.
func adjustChunkLimit(lastLimit int64, lastSize, targetSize int) int64 {
	switch {
	case lastSize < targetSize/2:
		lastLimit *= 2
	case lastSize > targetSize*2:
		lastLimit /= 2
	}
	return max(lastLimit, 1)
}
