package consensus

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/consensusclient"
	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/services/consensus/transport"
)

// serveAPI serves the Consensus port lis: the storage's propose and committed links (framed connections told
// by their preamble, see consensuspb) and gRPC for everything else. The listener is closed on shutdown.
func (n *Node) serveAPI(api *grpc.Server, lis net.Listener) {
	n.serveMuxed(lis, api, map[string]func(*framed.Conn){
		consensusclient.ProposePreamble:   n.serveProposeLink,
		consensusclient.CommittedPreamble: n.serveCommittedLink,
	})
}

// servePeer serves the peer port lis: the other members' messages links and gRPC for everything else.
func (n *Node) servePeer(peer *grpc.Server, lis net.Listener) {
	n.serveMuxed(lis, peer, map[string]func(*framed.Conn){transport.MessagesPreamble: n.transport.ServeLink})
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

// serveProposeLink submits every proposal of the link and answers every read index call; acknowledgements
// and answers go out as raft takes or refuses each proposal and as each read index is known.
func (n *Node) serveProposeLink(conn *framed.Conn) {
	answers := newAnswerQueue(n.stopping)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		answers.sendAll(func(resp *consensuspb.ProposeResponse) error {
			frame, err := proto.Marshal(resp)
			if err != nil {
				return err
			}
			return conn.Send(nil, frame)
		})
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		frame, err := conn.Receive()
		if err != nil {
			break
		}
		req := &consensuspb.ProposeRequest{}
		if err := proto.Unmarshal(frame, req); err != nil {
			n.log.Warn("propose link frame not decodable; closing the link", "err", err)
			break
		}
		for _, p := range req.GetProposals() {
			id := p.GetId()
			answers.expect()
			pctx := n.tel.Extract(ctx, p.GetTrace())
			if err := n.submit(pctx, p.GetData(), func(err error) { answers.ack(id, err) }); err != nil {
				answers.ack(id, err)
			}
		}
		for _, id := range req.GetReadIndex() {
			answers.expect()
			go func() {
				index, err := n.ReadIndex(ctx)
				answers.readIndex(id, index, err)
			}()
		}
	}
	cancel() // read index calls still waiting end
	answers.close()
	<-sent
}

// serveCommittedLink streams the committed log from the link's CommittedRequest on, until the link or the member
// ends; why it ended goes out as a last frame.
func (n *Node) serveCommittedLink(conn *framed.Conn) {
	frame, err := conn.Receive()
	req := &consensuspb.CommittedRequest{}
	if err != nil || proto.Unmarshal(frame, req) != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the client closes the link to stop it
		for {
			if _, err := conn.Receive(); err != nil {
				cancel()
				return
			}
		}
	}()
	err = n.Committed(ctx, req.GetFromIndex(), func(batch []commitlog.Entry) error {
		resp := &consensuspb.CommittedResponse{Entries: make([]*consensuspb.Entry, len(batch))}
		for i, e := range batch {
			resp.Entries[i] = consensusclient.EntryToProto(e)
		}
		frame, err := proto.Marshal(resp)
		if err != nil {
			return err
		}
		return conn.Send(nil, frame)
	})
	if frame, merr := proto.Marshal(&consensuspb.CommittedResponse{Error: status.Convert(toStatus(err)).Proto()}); merr == nil {
		_ = conn.Send(nil, frame)
		conn.CloseWrite(time.Second)
	}
}

// answerQueue collects a propose link's acknowledgements and read index answers for its sending goroutine.
type answerQueue struct {
	mu      sync.Mutex
	resp    *consensuspb.ProposeResponse
	pending int // calls taken but not yet answered
	closed  bool
	ready   chan struct{}
	// stopping ends the wait for pending answers: a stopping member may never give them.
	stopping <-chan struct{}
}

func newAnswerQueue(stopping <-chan struct{}) *answerQueue {
	return &answerQueue{resp: &consensuspb.ProposeResponse{}, ready: make(chan struct{}, 1), stopping: stopping}
}

func (q *answerQueue) expect() {
	q.mu.Lock()
	q.pending++
	q.mu.Unlock()
}

// ack queues the acknowledgement of proposal id: accepted, or refused with err.
func (q *answerQueue) ack(id uint64, err error) {
	a := &consensuspb.ProposeAck{Id: id}
	if err != nil {
		st := status.Convert(toStatus(err))
		a.Code, a.Message = uint32(st.Code()), st.Message()
	}
	q.add(func(r *consensuspb.ProposeResponse) { r.Acks = append(r.Acks, a) })
}

// readIndex queues the answer of read index call id.
func (q *answerQueue) readIndex(id, index uint64, err error) {
	a := &consensuspb.ReadIndexAnswer{Id: id, Index: index}
	if err != nil {
		st := status.Convert(toStatus(err))
		a.Code, a.Message = uint32(st.Code()), st.Message()
	}
	q.add(func(r *consensuspb.ProposeResponse) { r.ReadIndexes = append(r.ReadIndexes, a) })
}

func (q *answerQueue) add(put func(*consensuspb.ProposeResponse)) {
	q.mu.Lock()
	put(q.resp)
	q.pending--
	q.mu.Unlock()
	q.signal()
}

// close says no more calls will come; sendAll returns once every expected answer is sent.
func (q *answerQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *answerQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// sendAll sends what is queued, in batches, until the queue is closed and drained (or the member stops, or
// sending fails).
func (q *answerQueue) sendAll(send func(*consensuspb.ProposeResponse) error) {
	for {
		stopping := false
		select {
		case <-q.ready:
		case <-q.stopping:
			stopping = true
		}
		q.mu.Lock()
		resp, done := q.resp, stopping || (q.closed && q.pending == 0)
		q.resp = &consensuspb.ProposeResponse{}
		q.mu.Unlock()
		if len(resp.Acks)+len(resp.ReadIndexes) > 0 {
			if send(resp) != nil {
				return
			}
		}
		if done {
			return
		}
	}
}
