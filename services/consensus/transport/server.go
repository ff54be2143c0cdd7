package transport

import (
	"context"
	"errors"
	"fmt"
	"io"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/pkg/cairnpb/consensuspb"
)

// Messages receives one peer's stream of message batches and hands every message to raft.
func (t *Transport) Messages(stream grpc.ClientStreamingServer[consensuspb.MessageBatch, consensuspb.MessagesResult]) error {
	ctx := stream.Context()
	for {
		batch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&consensuspb.MessagesResult{})
		}
		if err != nil {
			return err
		}
		if err := t.admit(batch.GetFrom(), batch.GetClusterId()); err != nil {
			return err
		}
		for _, body := range batch.GetMessages() {
			if err := t.receive(ctx, body); err != nil {
				return err
			}
		}
	}
}

// Snapshot receives one snapshot message and returns once raft has taken it.
func (t *Transport) Snapshot(ctx context.Context, req *consensuspb.SnapshotMessage) (*consensuspb.SnapshotResult, error) {
	if err := t.admit(req.GetFrom(), req.GetClusterId()); err != nil {
		return nil, err
	}
	if err := t.receive(ctx, req.GetMessage()); err != nil {
		return nil, err
	}
	return &consensuspb.SnapshotResult{}, nil
}

// admit refuses senders from another cluster and removed members.
func (t *Transport) admit(from, clusterID uint64) error {
	if own := t.clusterID(); own != 0 && clusterID != own {
		t.cfg.Logger.Warn("refusing peer from another cluster", "peer", fmt.Sprintf("%x", from),
			"peer-cluster-id", fmt.Sprintf("%x", clusterID), "cluster-id", fmt.Sprintf("%x", own))
		return ErrClusterMismatch
	}
	if t.cfg.Raft.IsIDRemoved(from) {
		return ErrRemoved
	}
	return nil
}

func (t *Transport) receive(ctx context.Context, body []byte) error {
	m := &raftpb.Message{}
	if err := proto.Unmarshal(body, m); err != nil {
		return status.Errorf(codes.InvalidArgument, "transport: bad raft message: %v", err)
	}
	if t.cfg.Faults.drops(m.GetFrom(), t.cfg.MemberID) {
		return nil
	}
	if err := t.cfg.Raft.Process(ctx, m); err != nil {
		return status.Errorf(codes.Unavailable, "transport: raft did not take message: %v", err)
	}
	return nil
}
