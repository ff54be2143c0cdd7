package transport

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/framed"
)

// MessagesPreamble opens a messages link on a member's peer port (see consensuspb.Peer).
const MessagesPreamble = "CAIRN-RAFT-MESSAGES/1\n"

// dialTimeout bounds the opening of a messages link.
const dialTimeout = time.Second

// ServeLink receives one peer's messages link (opened with MessagesPreamble) and hands every message to raft,
// until the link ends, the transport stops, or the sender is refused, which it is told before the link is closed.
func (t *Transport) ServeLink(conn *framed.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-t.stopping:
			_ = conn.Close()
		case <-conn.Done():
		}
		cancel()
	}()
	var messages [][]byte // slices of the frame, which is reused for the next one: receive copies what raft keeps
	for {
		frame, err := conn.ReceiveBorrowed()
		if err != nil {
			return
		}
		from, clusterID, batch, err := decodeBatch(frame, messages[:0])
		messages = batch
		if err != nil {
			t.cfg.Logger.Warn("messages link frame not decodable; closing the link", "err", err)
			return
		}
		if err := t.admit(from, clusterID); err != nil {
			refuse(conn, err)
			return
		}
		t.series.of(from).receivedBytes.Add(float64(len(frame)))
		for _, body := range messages {
			if err := t.receive(ctx, body); err != nil {
				refuse(conn, err)
				return
			}
		}
		clear(messages)
	}
}

// refuse tells the sender of a messages link why it ends.
func refuse(conn *framed.Conn, err error) {
	if frame, merr := proto.Marshal(&consensuspb.MessagesResult{Error: status.Convert(err).Proto()}); merr == nil {
		_ = conn.Send(nil, frame)
		conn.CloseWrite(time.Second)
		for { // the sender reads the refusal, then closes: until then take (and drop) what it still sends
			if _, err := conn.ReceiveBorrowed(); err != nil {
				return
			}
		}
	}
}

// Snapshot receives one snapshot message and returns once raft has taken it.
func (t *Transport) Snapshot(ctx context.Context, req *consensuspb.SnapshotMessage) (*consensuspb.SnapshotResult, error) {
	if err := t.admit(req.GetFrom(), req.GetClusterId()); err != nil {
		return nil, err
	}
	t.series.of(req.GetFrom()).receivedBytes.Add(float64(len(req.GetMessage())))
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
	if m.GetType() == raftpb.MsgHeartbeatResp {
		t.series.of(m.GetFrom()).answered()
	}
	if err := t.cfg.Raft.Process(ctx, m); err != nil {
		return status.Errorf(codes.Unavailable, "transport: raft did not take message: %v", err)
	}
	return nil
}
