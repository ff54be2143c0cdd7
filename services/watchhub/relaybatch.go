package watchhub

import (
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// Relay batches (wiremsg.Batch): a frontend that relays a stream asks for them, and then the sender writes the
// responses of each flush as a few batches instead of a message each. A stream of 100 watchers on one key costs
// a hub 100 gRPC messages per revision, each a send, a pass of the connection's one writer goroutine and, at the
// frontend, a read, a hand-off and a receive, when one batch carries them all (the frontend still sends its
// client every response as its own message). What each watcher receives, and in what order, does not change:
// every response goes through the batch, in the order the sender writes it, and the batch is sent before the
// sender waits for more work, so no response waits in it longer than the flush that wrote it.

// relayBatchBytes is the most a batch holds: a message that would take it further is sent in the next batch,
// without waiting for the end of the flush. With gRPC's 5-byte message prefix a batch is one HTTP/2 frame
// (16 KiB), a frontend's 64 KiB window holds four and the two ends work in parallel. It is also the 16 KiB size
// class of the buffers a batch is written into here and received into at the frontend (wiremsg.Pool): a batch
// that went a message past 16 KiB, as every full one did, took a 32 KiB buffer at each end, and at 100,000
// relayed watchers under overload those held 63 MiB of a frontend's 110 MiB heap.
const relayBatchBytes = 16<<10 - 5

// useRelayBatches makes s send batches if its peer asked for them, stamped if it asked for stamps, held to
// its acknowledgments if it acknowledges them (relayflow.go), and tells the peer so in the response header
// (with the lag bound, for stamps); before anything is sent on s.
func (s *stream) useRelayBatches() {
	batches, stamps, acks := wiremsg.RelayBatchRequested(s.ctx)
	if !batches {
		return
	}
	header := metadata.Pairs(wiremsg.RelayBatchHeader, wiremsg.RelayBatchPlain)
	if stamps {
		header = metadata.Pairs(wiremsg.RelayBatchHeader, wiremsg.RelayBatchStamped,
			wiremsg.RelayLagBoundHeader, s.hub.lag.bound.String())
		if acks {
			header.Append(wiremsg.RelayBatchHeader, wiremsg.RelayBatchAcked)
		}
	}
	if s.srv.SetHeader(header) == nil {
		s.batch, s.stamps = &wiremsg.Batch{Pool: &s.hub.relayBuffers}, stamps
		if acks {
			s.flow = newRelayFlow()
		}
	}
}

// sendResponse writes a response the hub built whole (created, canceled, progress, a cancel for lag or
// compaction).
func (s *stream) sendResponse(resp *pb.WatchResponse) error {
	if s.batch == nil {
		if err := s.srv.Send(resp); err != nil {
			return sendError{err}
		}
		return nil
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		return fmt.Errorf("watch response for watch %d: %w", resp.WatchId, err)
	}
	return s.addToBatch(0, mem.SliceBuffer(b))
}

// sendEncoded writes a watcher's shared response; r may be reused once it returns.
func (s *stream) sendEncoded(r *encodedResponse) error {
	if s.batch == nil {
		if err := s.srv.SendMsg(r); err != nil {
			return sendError{err}
		}
		return nil
	}
	s.scratch = r.appendBuffers(s.scratch[:0])
	err := s.addToBatch(r.stamp, s.scratch...)
	clear(s.scratch)
	return err
}

// addToBatch adds a response to the batch with its lag stamp (0 for none; only on a stream that sends stamps),
// first sending the batch if the response would take it past relayBatchBytes.
func (s *stream) addToBatch(stamp uint64, parts ...mem.Buffer) error {
	if s.stamps {
		s.batch.Stamp(stamp)
	}
	if !s.batch.Fits(relayBatchBytes, parts...) {
		if err := s.sendBatch(); err != nil {
			return err
		}
	}
	s.batch.Add(parts...)
	return nil
}

// sendBatch sends what the batch holds, if anything; the sender calls it before it waits for more work. On a
// stream held to acknowledgments it may wait for them first, and then sets s.flowWaited.
func (s *stream) sendBatch() error {
	if s.batch == nil {
		return nil
	}
	msg := s.batch.Take()
	if msg == nil {
		return nil
	}
	if s.flow != nil {
		waited, err := s.flow.await(s.ctx, s.closed)
		if err != nil {
			msg.Parts.Free()
			return sendError{err}
		}
		s.flowWaited = s.flowWaited || waited
	}
	if err := s.srv.SendMsg(msg); err != nil {
		return sendError{err}
	}
	return nil
}
