package consensusclient

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/framed"
)

// Preambles of the framed links on a consensus member's Consensus port (see consensuspb).
const (
	ProposePreamble   = "CAIRN-CONSENSUS-PROPOSE/1\n"
	CommittedPreamble = "CAIRN-CONSENSUS-COMMITTED/1\n"
)

// dialTimeout bounds the opening of a link.
const dialTimeout = time.Second

// dialLink opens a framed link to target, failing as gRPC fails a call without a connection.
func dialLink(target, preamble string) (*framed.Conn, error) {
	conn, err := framed.Dial(target, preamble, dialTimeout)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "connection error: consensusclient: dial %s: %v", target, err)
	}
	return conn, nil
}

// proposeLink is one propose link: proposals and read index calls go out as frames from the caller's own
// goroutine (sharing a write when several are in flight), and a receiver hands each answer to its waiting
// caller. When the connection breaks, every waiting caller gets the error and the client opens a new link for
// later calls.
type proposeLink struct {
	conn *framed.Conn

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan linkAnswer
	err     error // set once broken
}

// linkAnswer is what a waiting call gets: a read index, or the error.
type linkAnswer struct {
	index uint64
	err   error
}

func openProposeLink(target string) (*proposeLink, error) {
	conn, err := dialLink(target, ProposePreamble)
	if err != nil {
		return nil, err
	}
	l := &proposeLink{conn: conn, waiting: map[uint64]chan linkAnswer{}}
	go l.receive()
	return l, nil
}

func (l *proposeLink) isBroken() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err != nil
}

// propose sends p and waits for its acknowledgement.
func (l *proposeLink) propose(ctx context.Context, p *consensuspb.Proposal) error {
	_, err := l.call(ctx, func(id uint64) *consensuspb.ProposeRequest {
		p.Id = id
		return &consensuspb.ProposeRequest{Proposals: []*consensuspb.Proposal{p}}
	})
	return err
}

// readIndex asks for a read index and waits for it.
func (l *proposeLink) readIndex(ctx context.Context) (uint64, error) {
	return l.call(ctx, func(id uint64) *consensuspb.ProposeRequest {
		return &consensuspb.ProposeRequest{ReadIndex: []uint64{id}}
	})
}

// call sends the request made for a fresh id and waits for its answer.
func (l *proposeLink) call(ctx context.Context, request func(id uint64) *consensuspb.ProposeRequest) (uint64, error) {
	answer := make(chan linkAnswer, 1)
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return 0, err
	}
	l.nextID++
	id := l.nextID
	l.waiting[id] = answer
	others := len(l.waiting) > 1
	l.mu.Unlock()
	frame, err := proto.Marshal(request(id))
	if err == nil {
		send := l.conn.Send
		if others { // calls are coming thick: let the ones about to be sent share the write
			send = l.conn.SendBatched
		}
		err = send(nil, frame)
	}
	if err != nil {
		l.fail(err)
	}
	select {
	case a := <-answer:
		return a.index, a.err
	case <-ctx.Done():
		l.mu.Lock()
		delete(l.waiting, id)
		l.mu.Unlock()
		return 0, ctx.Err()
	}
}

func (l *proposeLink) receive() {
	for {
		frame, err := l.conn.Receive()
		if err != nil {
			l.fail(err)
			return
		}
		resp := &consensuspb.ProposeResponse{}
		if err := proto.Unmarshal(frame, resp); err != nil {
			l.fail(err)
			return
		}
		l.mu.Lock()
		for _, a := range resp.GetAcks() {
			l.answerLocked(a.GetId(), linkAnswer{err: statusOf(a.GetCode(), a.GetMessage())})
		}
		for _, a := range resp.GetReadIndexes() {
			l.answerLocked(a.GetId(), linkAnswer{index: a.GetIndex(), err: statusOf(a.GetCode(), a.GetMessage())})
		}
		l.mu.Unlock()
	}
}

func (l *proposeLink) answerLocked(id uint64, a linkAnswer) {
	if ch, ok := l.waiting[id]; ok {
		delete(l.waiting, id)
		ch <- a
	}
}

// statusOf is the gRPC status error of code and message, nil for code 0.
func statusOf(code uint32, message string) error {
	if code == 0 {
		return nil
	}
	return status.Error(codes.Code(code), message)
}

// fail breaks the link: every waiting caller, and every later one, gets err.
func (l *proposeLink) fail(err error) {
	if _, ok := status.FromError(err); !ok {
		err = status.Error(codes.Unavailable, "consensusclient: propose link broke: "+err.Error())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = err
	for id, ch := range l.waiting {
		ch <- linkAnswer{err: err}
		delete(l.waiting, id)
	}
	_ = l.conn.Close()
}
