package consensusclient

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/pkg/cairnpb/consensuspb"
)

// maxProposalBatch bounds the proposals sent in one ProposeRequest.
const maxProposalBatch = 1024

// proposeStream is one Propose stream: a sender that batches queued proposals and a receiver that hands
// each acknowledgement to its waiting caller. When either side fails, every waiting caller gets the error
// and the client opens a new stream for later calls.
type proposeStream struct {
	stream grpc.BidiStreamingClient[consensuspb.ProposeRequest, consensuspb.ProposeResponse]
	cancel context.CancelFunc

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan error
	queue   []*consensuspb.Proposal
	err     error // set once broken
	ready   chan struct{}
	broken  chan struct{}
}

func openProposeStream(api consensuspb.ConsensusClient) (*proposeStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := api.Propose(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &proposeStream{
		stream: stream, cancel: cancel, waiting: map[uint64]chan error{},
		ready: make(chan struct{}, 1), broken: make(chan struct{}),
	}
	go s.sendLoop()
	go s.receiveLoop()
	return s, nil
}

func (s *proposeStream) isBroken() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// propose queues p and waits for its acknowledgement.
func (s *proposeStream) propose(ctx context.Context, p *consensuspb.Proposal) error {
	ack := make(chan error, 1)
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return s.err
	}
	s.nextID++
	p.Id = s.nextID
	s.waiting[p.Id] = ack
	s.queue = append(s.queue, p)
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
	select {
	case err := <-ack:
		return err
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.waiting, p.Id)
		s.mu.Unlock()
		return ctx.Err()
	}
}

func (s *proposeStream) sendLoop() {
	for {
		select {
		case <-s.ready:
		case <-s.broken:
			return
		}
		for {
			s.mu.Lock()
			n := min(len(s.queue), maxProposalBatch)
			batch := s.queue[:n:n]
			s.queue = s.queue[n:]
			s.mu.Unlock()
			if n == 0 {
				break
			}
			if err := s.stream.Send(&consensuspb.ProposeRequest{Proposals: batch}); err != nil {
				s.fail(err)
				return
			}
		}
	}
}

func (s *proposeStream) receiveLoop() {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		for _, a := range resp.GetAcks() {
			ch, ok := s.waiting[a.GetId()]
			if !ok {
				continue
			}
			delete(s.waiting, a.GetId())
			if a.GetCode() == 0 {
				ch <- nil
			} else {
				ch <- status.Error(codes.Code(a.GetCode()), a.GetMessage())
			}
		}
		s.mu.Unlock()
	}
}

// fail breaks the stream: every waiting caller, and every later one, gets err.
func (s *proposeStream) fail(err error) {
	if _, ok := status.FromError(err); !ok {
		err = status.Error(codes.Unavailable, "consensusclient: proposal stream broke: "+err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = err
	for id, ch := range s.waiting {
		ch <- err
		delete(s.waiting, id)
	}
	close(s.broken)
	s.cancel()
}
