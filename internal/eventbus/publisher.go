package eventbus

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/eventpb"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// SubjectPrefix is the cluster's subject prefix (DefaultSubjectPrefix when empty).
	SubjectPrefix string
	// MemberID is the publishing member; it names the subject.
	MemberID uint64
	// QueueLength bounds the records waiting to be sent (default 16384).
	QueueLength int
	// TakeTurns makes the members' publishers (which all get the same records) take turns instead of all sending:
	// a publisher sends while no publisher of a lower member ID has sent a heartbeat (every HeartbeatInterval,
	// default 200ms; every 2/5 of TakeoverAfter while it has been given nothing for TakeoverAfter) within
	// TakeoverAfter (default 1s), nor, standing by, a standby heartbeat (every 2 TakeoverAfter) within 5
	// TakeoverAfter: so only the next member takes over. One not in its turn keeps the newest StandbyRecords
	// (default 8192) records and sends them first when its turn comes, so a takeover leaves no gap a consumer
	// would have to fill from storage unless it took longer than those records.
	TakeTurns         bool
	HeartbeatInterval time.Duration
	TakeoverAfter     time.Duration
	StandbyRecords    int
	// OnlyWhenWanted makes the publisher send applied records only while a consumer has announced within
	// InterestTTL (default DefaultInterestTTL) that it needs them (AnnounceInterest), and for the first
	// InterestTTL after Start; the watchhubs announce while they have watch streams. Lease changes go out on
	// the lease subject regardless. Consumers fill what they missed from storage history, as they do for any
	// record the bus loses.
	OnlyWhenWanted bool
	InterestTTL    time.Duration
}

// DefaultInterestTTL is how long one announcement of interest keeps publishers sending applied records.
const DefaultInterestTTL = 3 * time.Second

// Publisher sends applied records to NATS from its own goroutine, so that publishing never blocks the caller.
type Publisher struct {
	cfg          PublisherConfig
	nc           *nats.Conn
	logger       *slog.Logger
	queue        chan queued
	subject      string
	leaseSubject string

	// Touched only by the sending goroutine:
	lastDropLog   time.Time
	lastLeaseSent time.Time
	turns         *turns       // nil unless TakeTurns
	standby       *standbyRing // records held while not this publisher's turn; nil while it is
	batch         []queued

	wantedAt    atomic.Int64 // Unix nanoseconds of the last announcement of interest (OnlyWhenWanted)
	interestSub *nats.Subscription

	published prometheus.Counter
	dropped   prometheus.Counter
	unwanted  prometheus.Counter
	wantedNow prometheus.GaugeFunc
	active    prometheus.Gauge

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
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.TakeoverAfter <= 0 {
		cfg.TakeoverAfter = DefaultTakeoverAfter
	}
	if cfg.StandbyRecords <= 0 {
		cfg.StandbyRecords = DefaultStandbyRecords
	}
	if cfg.InterestTTL <= 0 {
		cfg.InterestTTL = DefaultInterestTTL
	}
	p := &Publisher{
		cfg:          cfg,
		nc:           nc,
		logger:       logger,
		queue:        make(chan queued, cfg.QueueLength),
		subject:      Subject(cfg.SubjectPrefix, cfg.MemberID),
		leaseSubject: LeaseSubject(cfg.SubjectPrefix, cfg.MemberID),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "eventbus", Name: "published_records_total",
			Help: "Applied records handed to NATS.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "eventbus", Name: "dropped_records_total",
			Help: "Applied records dropped because the queue was full or NATS refused them; consumers fill the gap from storage history.",
		}),
		unwanted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: "eventbus", Name: "unwanted_records_total",
			Help: "Applied records not sent because no consumer had announced it needs them (no watch streams).",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cairn", Subsystem: "eventbus", Name: "publisher_active",
			Help: "1 while this member's publisher sends applied records (its turn, when the members take turns).",
		}),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	if cfg.TakeTurns {
		p.turns = &turns{memberID: cfg.MemberID, takeover: cfg.TakeoverAfter}
	}
	p.wantedNow = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "cairn", Subsystem: "eventbus", Name: "records_wanted",
		Help: "1 while applied records are sent: a consumer (a watchhub with watch streams) said it needs them.",
	}, func() float64 {
		if p.wanted(time.Now()) {
			return 1
		}
		return 0
	})
	p.active.Set(1)
	if reg != nil {
		reg.MustRegister(p.published, p.dropped, p.unwanted, p.wantedNow, p.active)
	}
	return p
}

// Start runs the sending goroutine until Stop. A publisher taking turns starts in its turn and steps back as
// soon as it hears a lower member's heartbeat.
func (p *Publisher) Start() {
	if p.cfg.OnlyWhenWanted {
		// Until it has listened for an InterestTTL, a new publisher cannot know that nobody wants the records:
		// it sends them (a restarted storage taking its turn back must not leave a gap on the bus).
		p.wantedAt.Store(time.Now().UnixNano())
		sub, err := p.nc.Subscribe(InterestSubject(p.cfg.SubjectPrefix), func(*nats.Msg) {
			p.wantedAt.Store(time.Now().UnixNano())
		})
		if err != nil {
			p.logger.Warn("consumers' interest not followed; this member sends every record", "err", err)
			p.cfg.OnlyWhenWanted = false
		}
		p.interestSub = sub
	}
	if p.turns != nil {
		if err := p.turns.watch(p.nc, p.cfg.SubjectPrefix); err != nil {
			p.logger.Warn("publisher heartbeats not followed; this member publishes every record", "err", err)
		}
	}
	go p.run()
}

// Publish queues rec with the trace context to carry; it never blocks, and drops rec when the queue is full.
// rec is the publisher's from then on (its trace field is set when it is sent).
func (p *Publisher) Publish(rec *eventpb.AppliedRecord, trace map[string]string) {
	if p.turns != nil {
		p.turns.given.Store(rec.GetIndex())
	}
	select {
	case p.queue <- queued{rec: rec, trace: trace}:
	default:
		p.dropped.Inc()
	}
}

// Stop sends what is queued (until ctx ends), flushes the connection and stops the goroutine.
func (p *Publisher) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() { close(p.stop) })
	if p.interestSub != nil {
		_ = p.interestSub.Unsubscribe()
	}
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
	if p.turns != nil {
		defer p.turns.stop()
		pace := &heartbeatPace{cfg: p.cfg, tick: time.NewTicker(p.cfg.HeartbeatInterval)}
		defer pace.stop()
		p.runTurns(pace)
		return
	}
	p.runTurns(nil)
}

// runTurns is run's loop; heartbeat ticks (pace is nil when not taking turns) send this publisher's heartbeat in
// its turn and notice a change of turn.
func (p *Publisher) runTurns(pace *heartbeatPace) {
	var ticks <-chan time.Time
	if pace != nil {
		ticks = pace.tick.C
	}
	for {
		heartbeat, standbyWake := ticks, (<-chan time.Time)(nil)
		switch {
		case pace == nil:
		case pace.idle && p.standby != nil:
			pace.pause()
			heartbeat, standbyWake = nil, pace.standbyWake(p.turns)
		default:
			pace.resume()
		}
		select {
		case q := <-p.queue:
			if pace != nil {
				pace.busy()
			}
			p.handle(p.fill(append(p.batch[:0], q)))
		case now := <-heartbeat:
			p.heartbeat(pace, now)
		case now := <-standbyWake:
			pace.wakeAt = time.Time{}
			p.heartbeat(pace, now)
		case <-p.stop:
			for {
				select {
				case q := <-p.queue:
					p.handle(p.fill(append(p.batch[:0], q)))
				default:
					return
				}
			}
		}
	}
}

// heartbeat is a tick of pace at now: it sends this publisher's heartbeat in its turn (a standby heartbeat when
// one is due) and notices a change of turn.
func (p *Publisher) heartbeat(pace *heartbeatPace, now time.Time) {
	pace.beat(now, p.turns.given.Load())
	p.turns.tick(now)
	if mine := p.myTurn(now); p.turns.beatDue(now, mine) {
		p.sendHeartbeat(mine)
	}
}

// handle sends batch in this publisher's turn, and holds it otherwise.
func (p *Publisher) handle(batch []queued) {
	p.batch = batch
	if p.turns == nil || p.myTurn(time.Now()) {
		p.send(batch)
		return
	}
	p.hold(batch, time.Now())
	clear(batch)
}

// hold keeps batch in the standby ring for a takeover: all of it while the applied records are wanted, else
// only the records with lease changes, the part send publishes in any case. A consumer that announces interest
// later fills what it missed from storage history, so records nobody wants cost a standby storage no memory
// (8192 of them held 4-5 MiB of keys and values under etcd's put benchmark).
func (p *Publisher) hold(batch []queued, now time.Time) {
	if !p.wanted(now) {
		leases := batch[:0] // in place: the caller clears batch after
		for _, q := range batch {
			if len(q.rec.GetLeases()) > 0 {
				leases = append(leases, q)
			}
		}
		p.unwanted.Add(float64(len(batch) - len(leases)))
		batch = leases
	}
	p.standby.add(batch)
}

// myTurn reports whether it is this publisher's turn at now, switching modes when that changed: a publisher
// whose turn comes sends the records it held first.
func (p *Publisher) myTurn(now time.Time) bool {
	mine := p.turns.mine(now)
	switch {
	case mine && p.standby != nil:
		held := p.standby.take()
		p.standby = nil
		p.active.Set(1)
		p.logger.Info("event bus publisher taking its turn: no lower member's publisher heard",
			"member-id", fmt.Sprintf("%x", p.cfg.MemberID), "resent_records", len(held))
		p.sendHeartbeat(true) // at once: the members above it stand by from now on
		for len(held) > 0 {
			n := min(len(held), maxBatchRecords)
			p.send(held[:n])
			held = held[n:]
		}
	case !mine && p.standby == nil:
		p.standby = newStandbyRing(p.cfg.StandbyRecords)
		p.active.Set(0)
		p.logger.Info("event bus publisher standing by: a lower member's publisher is sending",
			"member-id", fmt.Sprintf("%x", p.cfg.MemberID))
	}
	return mine
}

// sendHeartbeat tells the other members' publishers that this one is live, how far it has been given, and
// whether it is in its turn.
func (p *Publisher) sendHeartbeat(mine bool) {
	msg := &nats.Msg{Subject: HeartbeatSubject(p.cfg.SubjectPrefix), Header: nats.Header{}}
	msg.Header.Set(HeaderMember, strconv.FormatUint(p.cfg.MemberID, 16))
	msg.Header.Set(HeaderIndex, strconv.FormatUint(p.turns.given.Load(), 10))
	if !mine {
		msg.Header.Set(HeaderStandby, "1")
	}
	_ = p.nc.PublishMsg(msg) // a lost heartbeat only lets another publisher send too for a while
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

// wanted reports whether the applied records are to be sent at now.
func (p *Publisher) wanted(now time.Time) bool {
	return !p.cfg.OnlyWhenWanted || now.UnixNano()-p.wantedAt.Load() < int64(p.cfg.InterestTTL)
}

// send publishes batch as one eventpb.AppliedBatch, split in halves while it exceeds NATS' payload limit, when
// it is wanted; its lease changes in any case.
func (p *Publisher) send(batch []queued) {
	recs := make([]*eventpb.AppliedRecord, len(batch))
	for i, q := range batch {
		q.rec.Trace = q.trace
		recs[i] = q.rec
	}
	if !p.wanted(time.Now()) {
		p.unwanted.Add(float64(len(batch)))
		p.sendLeases(recs)
		return
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
	p.sendLeases(recs)
}

// leasePositionInterval is how often, at most, the lease subject carries a record without lease changes, so that
// leasekeepers know how far the store has got (the revision in their answers' headers).
const leasePositionInterval = 100 * time.Millisecond

// sendLeases publishes on the lease subject the records of recs that change leases, stripped to what an
// eventpb.LeaseRecord holds, or the last record alone when none does and the subject has been quiet for
// leasePositionInterval.
func (p *Publisher) sendLeases(recs []*eventpb.AppliedRecord) {
	var leases []*eventpb.LeaseRecord
	for _, r := range recs {
		if len(r.Leases) > 0 {
			leases = append(leases, leaseRecord(r))
		}
	}
	now := time.Now()
	if len(leases) == 0 {
		if now.Sub(p.lastLeaseSent) < leasePositionInterval {
			return
		}
		leases = append(leases, leaseRecord(recs[len(recs)-1]))
	}
	body, err := proto.Marshal(&eventpb.LeaseBatch{Records: leases})
	if err != nil {
		return // lease records of plain integers always encode
	}
	first, last := leases[0], leases[len(leases)-1]
	msg := &nats.Msg{Subject: p.leaseSubject, Data: body, Header: nats.Header{}}
	msg.Header.Set(HeaderFirstIndex, strconv.FormatUint(first.GetIndex(), 10))
	msg.Header.Set(HeaderIndex, strconv.FormatUint(last.GetIndex(), 10))
	msg.Header.Set(HeaderRevision, strconv.FormatInt(last.GetRevision(), 10))
	msg.Header.Set(HeaderMember, strconv.FormatUint(p.cfg.MemberID, 16))
	if err := p.nc.PublishMsg(msg); err == nil {
		p.lastLeaseSent = now
	}
}

func leaseRecord(r *eventpb.AppliedRecord) *eventpb.LeaseRecord {
	return &eventpb.LeaseRecord{MemberId: r.MemberId, Index: r.Index, Term: r.Term, Revision: r.Revision, Leases: r.Leases}
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
