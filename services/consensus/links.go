package consensus

import (
	"context"
	"encoding/binary"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/consensusclient"
	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/link"
	"github.com/cairn-kv/cairn/services/consensus/transport"
)

// serveAPI serves the Consensus port lis: the storage's propose and committed links (framed connections told
// by their preamble, see consensuspb) and gRPC for everything else. The listener is closed on shutdown.
func (n *Node) serveAPI(api *grpc.Server, lis net.Listener) {
	n.serveMuxed(n.deps.Internal.Listener(lis, "consensus"), api, map[string]func(*framed.Conn){
		consensuspb.ProposePreamble:   n.serveProposeLink,
		consensuspb.CommittedPreamble: n.serveCommittedLink,
	})
}

// servePeer serves the peer port lis: the other members' messages links and gRPC for everything else.
func (n *Node) servePeer(peer *grpc.Server, lis net.Listener) {
	n.serveMuxed(n.deps.Peer.Listener(lis, "consensus-peer"), peer, map[string]func(*framed.Conn){transport.MessagesPreamble: n.transport.ServeLink})
}

// serveMuxed serves lis with s and links (framed.Serve); a link ends when the member stops.
func (n *Node) serveMuxed(lis net.Listener, s *grpc.Server, links map[string]func(*framed.Conn)) {
	untilStopped := map[string]func(*framed.Conn){}
	for preamble, serve := range links {
		untilStopped[preamble] = func(conn *framed.Conn) {
			go func() {
				select {
				case <-n.stopping:
					_ = conn.Close()
				case <-conn.Done():
				}
			}()
			serve(conn)
		}
	}
	n.ports = append(n.ports, framed.Serve(lis, s, untilStopped, n.log))
}

// serveProposeLink serves a storage's propose link (internal/link): each Propose call is submitted to raft on
// the link's receiving goroutine (so a storage proposing faster than raft takes proposals is slowed by TCP flow
// control) and answered when raft takes or refuses it; each ReadIndex call runs on one of the link's workers.
// The link ends when the member stops (serveMuxed closes it).
func (n *Node) serveProposeLink(conn *framed.Conn) {
	srv := link.NewServer(link.ServerConfig{Telemetry: n.tel, Name: "consensus.propose",
		MethodNames: consensuspb.ProposeMethodNames, Logger: n.log})
	srv.Handle(consensuspb.ProposeMethod, func(call *link.Call) {
		if err := n.submitCall(call); err != nil {
			answerProposal(call, err)
		}
	})
	srv.Handle(consensuspb.ReadIndexMethod, func(call *link.Call) {
		call.Go(func(ctx context.Context) {
			index, err := n.ReadIndex(ctx)
			if err != nil {
				call.Fail(toStatus(err))
				return
			}
			call.Reply(nil, binary.AppendUvarint(nil, index))
		})
	})
	srv.Serve(conn, nil)
}

// submitCall submits a Propose call, to be answered when raft takes or refuses it. The call's own context (a
// deadline timer and a cancel registration, for the wait while raft's queue is full) is made only when the
// call has to wait or is traced: a proposal the queue takes at once needs only the connection's, and a timer and
// a context per write were a fifth of a leader's allocations.
func (n *Node) submitCall(call *link.Call) error {
	var ctx context.Context
	if call.Traced() {
		ctx = call.Context() // the call's span, ended when it is answered, parents the proposal's
	} else {
		ctx = call.ConnContext() // no trace, no span: the connection's context, made once
	}
	p, err := n.newProposal(ctx, call.Body)
	if err != nil {
		return err
	}
	p.call = call
	select {
	case n.proposeC <- p:
		return nil
	default:
		return n.enqueue(call.Context(), p)
	}
}

// answerProposal acknowledges a proposal: accepted (err nil), or refused with err.
func answerProposal(call *link.Call, err error) {
	if err != nil {
		call.Fail(toStatus(err))
		return
	}
	call.Reply(nil)
}

// serveCommittedLink streams the committed log from the link's CommittedRequest on, until the link or the member
// ends; why it ended goes out as a last frame.
func (n *Node) serveCommittedLink(conn *framed.Conn) {
	frame, err := conn.ReceiveBorrowed()
	req := &consensuspb.CommittedRequest{}
	if err != nil || proto.Unmarshal(frame, req) != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the client closes the link to stop it
		for {
			if _, err := conn.ReceiveBorrowed(); err != nil {
				cancel()
				return
			}
		}
	}()
	var enc committedEncoder
	err = n.Committed(ctx, req.GetFromIndex(), func(batch []commitlog.Entry) error {
		frame, release, err := enc.encode(batch)
		if err != nil {
			return err
		}
		return conn.Send(release, frame)
	})
	if frame, merr := proto.Marshal(&consensuspb.CommittedResponse{Error: status.Convert(toStatus(err)).Proto()}); merr == nil {
		_ = conn.Send(nil, frame)
		conn.CloseWrite(time.Second)
	}
}

// committedEncoder encodes the batches of a committed link as CommittedResponse frames, into messages and
// buffers it reuses: a frame's buffer comes back when the link has written it (framed.Conn.Send's release).
type committedEncoder struct {
	resp    consensuspb.CommittedResponse
	entries []*consensuspb.Entry // resp's, reused
	free    chan []byte          // written frames' buffers
}

// maxKeptFrame bounds a frame buffer kept for the next batches, and keptFrames how many are kept: a frame
// larger than framed.CopyLimit is written from its buffer, which comes back only once written, so a few are in
// flight while the storage reads slower than the log grows.
const (
	maxKeptFrame = 256 << 10
	keptFrames   = 4
)

// encode returns batch's frame, and the release to pass to Send with it.
func (c *committedEncoder) encode(batch []commitlog.Entry) (frame []byte, release func(), err error) {
	if c.free == nil {
		c.free = make(chan []byte, keptFrames)
	}
	for len(c.entries) < len(batch) {
		c.entries = append(c.entries, &consensuspb.Entry{})
	}
	c.resp.Entries = c.entries[:len(batch)]
	for i, e := range batch {
		out := c.entries[i]
		out.Index, out.Term, out.Kind, out.Data, out.Snapshot = e.Index, e.Term, consensuspb.EntryKind(e.Kind), e.Data, nil
		if e.Snapshot != nil {
			out.Snapshot = consensusclient.EntryToProto(e).GetSnapshot()
		}
	}
	select {
	case frame = <-c.free:
	default:
	}
	if size := proto.Size(&c.resp); cap(frame) < size {
		frame = make([]byte, 0, size+size/2) // room for the next batches, which may be a little larger
	}
	frame, err = proto.MarshalOptions{}.MarshalAppend(frame[:0], &c.resp)
	for i := range batch {
		c.entries[i].Data = nil // not to pin the log's entries
	}
	if err != nil {
		return nil, nil, err
	}
	if cap(frame) > maxKeptFrame {
		return frame, nil, nil
	}
	return frame, func() {
		select {
		case c.free <- frame:
		default:
		}
	}, nil
}
