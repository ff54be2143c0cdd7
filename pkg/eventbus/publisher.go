package eventbus

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/pkg/cairnpb/eventpb"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// SubjectPrefix is the cluster's subject prefix (DefaultSubjectPrefix when empty).
	SubjectPrefix string
	// MemberID is the publishing member; it names the subject.
	MemberID uint64
	// QueueLength bounds the records waiting to be sent (default 16384).
	QueueLength int
}

// Publisher sends applied records to NATS from its own goroutine, so that publishing never blocks the caller.
type Publisher struct {
	cfg     PublisherConfig
	nc      *nats.Conn
	logger  *slog.Logger
	queue   chan queued
	subject string

	lastDropLog time.Time // touched only by the sending goroutine

	published prometheus.Counter
	dropped   prometheus.Counter

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

type queued struct {
	rec   *eventpb.AppliedRecord
	trace map[string]string
}

// NewPublisher returns a publisher on nc; its counters are registered on reg when reg is not nil.
func NewPublisher(nc *nats.Conn, cfg PublisherConfig, reg prometheus.Registerer, logger *slog.Logger) *Publisher {
	if cfg.QueueLength <= 0 {
		cfg.QueueLength = 16384
	}
	p := &Publisher{
		cfg:     cfg,
		nc:      nc,
		logger:  logger,
		queue:   make(chan queued, cfg.QueueLength),
		subject: Subject(cfg.SubjectPrefix, cfg.MemberID),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "eventbus", Name: "published_records_total",
			Help: "Applied records handed to NATS.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "eventbus", Name: "dropped_records_total",
			Help: "Applied records dropped because the queue was full or NATS refused them; consumers fill the gap from storage history.",
		}),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	if reg != nil {
		reg.MustRegister(p.published, p.dropped)
	}
	return p
}

// Start runs the sending goroutine until Stop.
func (p *Publisher) Start() { go p.run() }

// Publish queues rec with the trace context to carry; it never blocks, and drops rec when the queue is full.
// rec is the publisher's from then on (its trace field is set when it is sent).
func (p *Publisher) Publish(rec *eventpb.AppliedRecord, trace map[string]string) {
	select {
	case p.queue <- queued{rec: rec, trace: trace}:
	default:
		p.dropped.Inc()
	}
}

// Stop sends what is queued (until ctx ends), flushes the connection and stops the goroutine.
func (p *Publisher) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() { close(p.stop) })
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !p.nc.IsConnected() {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok { // nats requires one
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	return p.nc.FlushWithContext(ctx)
}

// maxBatchRecords bounds the records of one bus message.
const maxBatchRecords = 512

// run sends what is queued, as one message per batch: whatever has queued up while the previous message went
// out (one record when the store is quiet, many under load), so batching adds no wait.
func (p *Publisher) run() {
	defer close(p.done)
	var batch []queued
	for {
		select {
		case q := <-p.queue:
			batch = p.fill(append(batch[:0], q))
			p.send(batch)
		case <-p.stop:
			for {
				select {
				case q := <-p.queue:
					batch = p.fill(append(batch[:0], q))
					p.send(batch)
				default:
					return
				}
			}
		}
	}
}

// fill adds to batch what else is queued, up to maxBatchRecords.
func (p *Publisher) fill(batch []queued) []queued {
	for len(batch) < maxBatchRecords {
		select {
		case q := <-p.queue:
			batch = append(batch, q)
		default:
			return batch
		}
	}
	return batch
}

// send publishes batch as one eventpb.AppliedBatch, split in halves while it exceeds NATS' payload limit.
func (p *Publisher) send(batch []queued) {
	recs := make([]*eventpb.AppliedRecord, len(batch))
	for i, q := range batch {
		q.rec.Trace = q.trace
		recs[i] = q.rec
	}
	first, last := recs[0], recs[len(recs)-1]
	body, err := proto.Marshal(&eventpb.AppliedBatch{Records: recs})
	if err != nil {
		p.dropped.Add(float64(len(batch)))
		p.logger.Error("applied records not encodable", "first_index", first.GetIndex(), "last_index", last.GetIndex(), "err", err)
		return
	}
	if int64(len(body)) > p.nc.MaxPayload() && len(batch) > 1 {
		half := len(batch) / 2
		p.send(batch[:half])
		p.send(batch[half:])
		return
	}
	msg := &nats.Msg{Subject: p.subject, Data: body, Header: nats.Header{}}
	msg.Header.Set(HeaderFirstIndex, strconv.FormatUint(first.GetIndex(), 10))
	msg.Header.Set(HeaderIndex, strconv.FormatUint(last.GetIndex(), 10))
	msg.Header.Set(HeaderRevision, strconv.FormatInt(last.GetRevision(), 10))
	msg.Header.Set(HeaderMember, strconv.FormatUint(p.cfg.MemberID, 16))
	if err := p.nc.PublishMsg(msg); err != nil {
		p.dropped.Add(float64(len(batch)))
		p.logDropped(last.GetIndex(), err)
		return
	}
	p.published.Add(float64(len(batch)))
}

// logDropped logs a refused publish at most every few seconds: while NATS is away every record fails the same way.
func (p *Publisher) logDropped(index uint64, err error) {
	if time.Since(p.lastDropLog) < 5*time.Second {
		return
	}
	p.lastDropLog = time.Now()
	p.logger.Warn("applied record not published; consumers will fill the gap from history",
		"index", index, "err", err)
}
