package eventbus

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cairn-kv/cairn/api/eventpb"
	"github.com/cairn-kv/cairn/internal/eventbus/eventbustest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// The tests of this file are about time (heartbeats, TakeoverAfter, InterestTTL), so they run in a synctest
// bubble on a fake clock that moves only when every goroutine of the bubble waits, on an in-process bus
// (eventbustest): a loaded machine cannot make a turn or an announcement expire early.

// TestPublishersTakeTurns: of the members' publishers taking turns, only the lowest member's sends; when it
// stops, the next takes over within TakeoverAfter and first sends the records it held, so the subscriber misses
// no index; when it comes back, the other steps back.
func TestPublishersTakeTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := eventbustest.Start(t)
		var all collector
		subscribeCollectors(t, bus.Connect(t, "sub"), map[*collector]bool{&all: false})
		start := func(member uint64) (*Publisher, *prometheus.Registry) {
			nc := bus.Connect(t, "pub")
			reg := prometheus.NewRegistry()
			pub := NewPublisher(nc, PublisherConfig{SubjectPrefix: "test", MemberID: member, TakeTurns: true,
				HeartbeatInterval: 50 * time.Millisecond, TakeoverAfter: 500 * time.Millisecond, StandbyRecords: 1000}, reg, quietLogger())
			pub.Start()
			t.Cleanup(func() { _ = pub.Stop(context.Background()) })
			return pub, reg
		}
		active := func(reg *prometheus.Registry) bool {
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range families {
				if f.GetName() == "cairn_eventbus_publisher_active" {
					return f.GetMetric()[0].GetGauge().GetValue() == 1
				}
			}
			t.Fatal("no cairn_eventbus_publisher_active gauge")
			return false
		}
		publish := func(pubs []*Publisher, first, last uint64) {
			for i := first; i <= last; i++ {
				for _, p := range pubs {
					p.Publish(record(i), nil)
				}
			}
		}
		seen := func(first, last uint64) bool {
			all.mu.Lock()
			defer all.mu.Unlock()
			got := map[uint64]bool{}
			for _, indexes := range all.byMember {
				for _, i := range indexes {
					got[i] = true
				}
			}
			for i := first; i <= last; i++ {
				if !got[i] {
					return false
				}
			}
			return true
		}

		p1, reg1 := start(0x1)
		p2, reg2 := start(0x2)
		p3, reg3 := start(0x3)
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "members 2 and 3 standing by", func() bool {
			return active(reg1) && !active(reg2) && !active(reg3)
		})
		publish([]*Publisher{p1, p2, p3}, 1, 100)
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "records 1-100", func() bool { return seen(1, 100) })
		if all.count(0x1) != 100 || all.count(0x2)+all.count(0x3) != 0 {
			t.Fatalf("sent by members 1, 2, 3: %d, %d, %d; want 100, 0, 0", all.count(0x1), all.count(0x2), all.count(0x3))
		}

		if err := p1.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		publish([]*Publisher{p2, p3}, 101, 200) // while member 2 still stands by
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 2 taking over and resending what it held", func() bool {
			return seen(101, 200)
		})
		if !active(reg2) || active(reg3) || all.count(0x3) != 0 {
			t.Fatalf("after member 1 stopped: member 2 active %v, member 3 active %v and sent %d; want true, false, 0",
				active(reg2), active(reg3), all.count(0x3))
		}

		p1, reg1 = start(0x1) // back, but behind until it is given what the others were
		publish([]*Publisher{p1, p2, p3}, 201, 300)
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "records 201-300", func() bool { return seen(201, 300) })
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 2 standing by again", func() bool {
			return active(reg1) && !active(reg2)
		})
		before := all.count(0x2)
		publish([]*Publisher{p1, p2, p3}, 301, 400)
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "records 301-400", func() bool { return seen(301, 400) })
		if all.count(0x2) != before || all.count(0x3) != 0 {
			t.Fatalf("members 2 and 3 sent %d and %d records with member 1 back; want none", all.count(0x2)-before, all.count(0x3))
		}
	})
}

// TestPublisherBehindLosesItsTurn: a lower member whose publisher is given nothing more (its storage stopped
// applying) while the others go on loses its turn within about TakeoverAfter, and the next member sends.
func TestPublisherBehindLosesItsTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := eventbustest.Start(t)
		var all collector
		subscribeCollectors(t, bus.Connect(t, "sub"), map[*collector]bool{&all: false})
		var pubs []*Publisher
		for _, member := range []uint64{0x1, 0x2} {
			nc := bus.Connect(t, "pub")
			pub := NewPublisher(nc, PublisherConfig{SubjectPrefix: "test", MemberID: member, TakeTurns: true,
				HeartbeatInterval: 50 * time.Millisecond, TakeoverAfter: 500 * time.Millisecond}, nil, quietLogger())
			pub.Start()
			t.Cleanup(func() { _ = pub.Stop(context.Background()) })
			pubs = append(pubs, pub)
		}
		next := uint64(1)
		publish := func(to []*Publisher) {
			for _, p := range to {
				p.Publish(record(next), nil)
			}
			next++
		}
		for range 20 { // both given the same records: member 1 sends them
			publish(pubs)
			time.Sleep(10 * time.Millisecond)
		}
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 1's records", func() bool {
			return all.count(0x1) == 20
		})
		start := time.Now()
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 2 sending", func() bool {
			publish(pubs[1:])
			time.Sleep(10 * time.Millisecond)
			return all.count(0x2) > 0
		})
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("member 2 took its turn after %v, want about TakeoverAfter (500ms) plus a heartbeat", took)
		}
	})
}

// TestPublisherSendsOnlyWhenWanted: a publisher with OnlyWhenWanted sends applied records only while a consumer's
// announcement of interest is fresh, and lease changes always.
func TestPublisherSendsOnlyWhenWanted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := eventbustest.Start(t)
		var applied collector
		sub := bus.Connect(t, "sub")
		subscribeCollectors(t, sub, map[*collector]bool{&applied: false})
		var mu sync.Mutex
		var leases []uint64
		if _, err := SubscribeLeaseChanges(sub, "test", func(rec *eventpb.AppliedRecord, _ Meta) {
			mu.Lock()
			defer mu.Unlock()
			leases = append(leases, rec.Index)
		}); err != nil {
			t.Fatal(err)
		}
		eventbustest.Flush(t, sub)
		nc := bus.Connect(t, "pub")
		reg := prometheus.NewRegistry()
		const ttl = 300 * time.Millisecond
		pub := NewPublisher(nc, PublisherConfig{SubjectPrefix: "test", MemberID: 0x1a, OnlyWhenWanted: true, InterestTTL: ttl},
			reg, quietLogger())
		pub.Start()
		defer pub.Stop(context.Background())
		time.Sleep(ttl) // a new publisher sends for its first InterestTTL
		next := uint64(0)
		// publishUntilLease publishes n records and then one with a lease change, and waits for that one: every
		// record before it has been sent, or not, by then.
		publishUntilLease := func(n int) {
			t.Helper()
			for range n {
				next++
				pub.Publish(record(next), nil)
			}
			next++
			rec := record(next)
			rec.Leases = []*eventpb.LeaseChange{{Type: eventpb.LeaseChange_GRANTED, Id: int64(next), Ttl: 30}}
			pub.Publish(rec, nil)
			lease := next
			waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the lease change", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(leases) > 0 && leases[len(leases)-1] == lease
			})
		}

		publishUntilLease(10)
		if n := applied.count(0x1a); n != 0 {
			t.Fatalf("%d applied records sent before any consumer wanted them", n)
		}
		if got := testutil.ToFloat64(pub.unwanted); got != 11 {
			t.Fatalf("unwanted_records_total = %v, want 11", got)
		}
		if got := testutil.ToFloat64(pub.wantedNow); got != 0 {
			t.Fatalf("records_wanted = %v before any announcement, want 0", got)
		}

		if err := AnnounceInterest(sub, "test"); err != nil {
			t.Fatal(err)
		}
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "records once wanted", func() bool {
			publishUntilLease(0)
			return applied.count(0x1a) > 0
		})
		if got := testutil.ToFloat64(pub.wantedNow); got != 1 {
			t.Fatalf("records_wanted = %v while wanted, want 1", got)
		}
		before := applied.count(0x1a)
		publishUntilLease(10)
		if got := applied.count(0x1a) - before; got != 11 {
			t.Fatalf("%d of 11 records sent while wanted", got)
		}

		time.Sleep(2 * ttl) // the announcement goes stale
		before = applied.count(0x1a)
		publishUntilLease(10)
		if got := applied.count(0x1a) - before; got != 0 {
			t.Fatalf("%d records sent after the interest went stale", got)
		}
	})
}

// TestHeartbeatsSlowWhileIdle: a publisher given nothing for TakeoverAfter sends its heartbeats every
// idleHeartbeatInterval instead of every HeartbeatInterval; the next record brings back the full pace; and a
// higher member never takes the turn of an idle but live lower one.
func TestHeartbeatsSlowWhileIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := eventbustest.Start(t)
		cfg := PublisherConfig{SubjectPrefix: "test", TakeTurns: true, HeartbeatInterval: 50 * time.Millisecond,
			TakeoverAfter: 500 * time.Millisecond}
		var mu sync.Mutex
		beats := 0 // member 1's heartbeats
		sub, err := bus.Connect(t, "sub").Subscribe(HeartbeatSubject("test"), func(msg *nats.Msg) {
			if msg.Header.Get(HeaderMember) == "1" {
				mu.Lock()
				beats++
				mu.Unlock()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		var all collector
		subscribeCollectors(t, bus.Connect(t, "records"), map[*collector]bool{&all: false})
		pubs := startPublishers(t, bus, cfg, 0x1, 0x2)
		count := func(window time.Duration) int {
			mu.Lock()
			before := beats
			mu.Unlock()
			time.Sleep(window)
			mu.Lock()
			defer mu.Unlock()
			return beats - before
		}
		const window = 2 * time.Second
		time.Sleep(cfg.TakeoverAfter + cfg.idleHeartbeatInterval()) // idle since the start
		if got, want := count(window), int(window/cfg.idleHeartbeatInterval()); got < want-1 || got > want+1 {
			t.Fatalf("%d heartbeats in %v idle, want about %d (every %v)", got, window, want, cfg.idleHeartbeatInterval())
		}
		for i := range uint64(5) {
			for _, p := range pubs {
				p.Publish(record(i+1), nil)
			}
		}
		if got, want := count(cfg.TakeoverAfter/2), int(cfg.TakeoverAfter/2/cfg.HeartbeatInterval); got < want-1 {
			t.Fatalf("%d heartbeats in %v after records, want about %d (every %v)", got, cfg.TakeoverAfter/2, want, cfg.HeartbeatInterval)
		}
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "records 1-5 from member 1", func() bool {
			return all.count(0x1) == 5
		})
		if n := all.count(0x2); n != 0 || testutil.ToFloat64(pubs[1].active) != 0 {
			t.Fatalf("member 2 sent %d records after the idle spell (active %v), want none: member 1 is live",
				n, testutil.ToFloat64(pubs[1].active))
		}
	})
}

// TestStandbyHoldsOnlyWhatIsWanted: while no consumer wants applied records, a publisher standing by holds only
// the records with lease changes (which are sent in any case), and sends those when it takes over.
func TestStandbyHoldsOnlyWhatIsWanted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := eventbustest.Start(t)
		sub := bus.Connect(t, "sub")
		var mu sync.Mutex
		leaseFrom := map[uint64][]uint64{} // lease-change record indexes by the member that sent them
		if _, err := SubscribeLeaseChanges(sub, "test", func(rec *eventpb.AppliedRecord, meta Meta) {
			mu.Lock()
			defer mu.Unlock()
			leaseFrom[meta.Member] = append(leaseFrom[meta.Member], rec.Index)
		}); err != nil {
			t.Fatal(err)
		}
		eventbustest.Flush(t, sub)
		const ttl = 300 * time.Millisecond
		start := func(member uint64) *Publisher {
			pub := NewPublisher(bus.Connect(t, "pub"), PublisherConfig{SubjectPrefix: "test", MemberID: member,
				TakeTurns: true, HeartbeatInterval: 50 * time.Millisecond, TakeoverAfter: 500 * time.Millisecond,
				OnlyWhenWanted: true, InterestTTL: ttl}, prometheus.NewRegistry(), quietLogger())
			pub.Start()
			t.Cleanup(func() { _ = pub.Stop(context.Background()) })
			return pub
		}
		p1, p2 := start(0x1), start(0x2)
		time.Sleep(2 * ttl) // past the first InterestTTL, with no announcement: nothing is wanted
		for i := uint64(1); i <= 10; i++ {
			p1.Publish(record(i), nil)
			p2.Publish(record(i), nil)
		}
		// Member 1 never gets the lease change (a consumer drops copies of what it has, so this one must come
		// from member 2's standby ring).
		lease := record(11)
		lease.Leases = []*eventpb.LeaseChange{{Type: eventpb.LeaseChange_GRANTED, Id: 11, Ttl: 30}}
		p2.Publish(lease, nil)
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 2 dropping the 10 unwanted records", func() bool {
			return testutil.ToFloat64(p2.unwanted) == 10
		})
		if err := p1.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "member 2 taking over and resending the lease change", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(leaseFrom[0x2]) > 0
		})
		mu.Lock()
		defer mu.Unlock()
		if got := leaseFrom[0x2]; len(got) != 1 || got[0] != 11 {
			t.Fatalf("member 2 resent lease-change records %v, want [11]", got)
		}
		if got := testutil.ToFloat64(p2.unwanted); got != 11 {
			t.Fatalf("member 2 unwanted_records_total = %v, want 11 (10 not held, the held one's record unwanted)", got)
		}
	})
}

// TestStandbysBeatRarely: of three publishers taking turns on an idle bus, the two standing by send a standby
// heartbeat only every standbyHeartbeatInterval; when the sender and the next member stop together, the third
// takes over within standbyWindow (not within TakeoverAfter: the next member's standby heartbeats held it).
func TestStandbysBeatRarely(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := eventbustest.Start(t)
		cfg := PublisherConfig{SubjectPrefix: "test", TakeTurns: true, HeartbeatInterval: 50 * time.Millisecond,
			TakeoverAfter: 500 * time.Millisecond}
		var mu sync.Mutex
		beats, standbyBeats := map[string]int{}, map[string]int{}
		sub, err := bus.Connect(t, "sub").Subscribe(HeartbeatSubject("test"), func(msg *nats.Msg) {
			mu.Lock()
			defer mu.Unlock()
			if msg.Header.Get(HeaderStandby) != "" {
				standbyBeats[msg.Header.Get(HeaderMember)]++
			} else {
				beats[msg.Header.Get(HeaderMember)]++
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		var all collector
		subscribeCollectors(t, bus.Connect(t, "records"), map[*collector]bool{&all: false})
		pubs := startPublishers(t, bus, cfg, 0x1, 0x2, 0x3)
		time.Sleep(2 * cfg.TakeoverAfter) // settled: member 1 sends, 2 and 3 stand by
		mu.Lock()
		clear(beats)
		clear(standbyBeats)
		mu.Unlock()
		const window = 6 * time.Second
		time.Sleep(window)
		mu.Lock()
		standbyEvery := 2 * cfg.TakeoverAfter
		for _, member := range []string{"2", "3"} {
			if got, most := standbyBeats[member], int(window/standbyEvery)+1; got < 3 || got > most || beats[member] != 0 {
				t.Errorf("member %s: %d standby heartbeats and %d in its turn in %v idle, want 3 to %d and none",
					member, got, beats[member], window, most)
			}
		}
		if got := beats["1"]; got < int(window/cfg.idleHeartbeatInterval())-1 {
			t.Errorf("member 1 (sending): %d heartbeats in %v idle, want about %d", got, window, int(window/cfg.idleHeartbeatInterval()))
		}
		mu.Unlock()

		for _, p := range pubs[:2] {
			if err := p.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		start, next := time.Now(), uint64(1)
		waittest.Until(t, 30*time.Second, 5*time.Millisecond, "member 3 sending", func() bool {
			pubs[2].Publish(record(next), nil)
			next++
			time.Sleep(10 * time.Millisecond)
			return all.count(0x3) > 0
		})
		if took := time.Since(start); took < cfg.TakeoverAfter || took > 5*cfg.TakeoverAfter+50*time.Millisecond {
			t.Fatalf("member 3 took its turn %v after members 1 and 2 stopped, want between TakeoverAfter and 5 TakeoverAfter", took)
		}
	})
}

// startPublishers starts a publisher per member, each cfg with its MemberID, on its own connection to bus; the
// test's cleanup stops them.
func startPublishers(t *testing.T, bus *eventbustest.Bus, cfg PublisherConfig, members ...uint64) []*Publisher {
	t.Helper()
	var pubs []*Publisher
	for _, member := range members {
		c := cfg
		c.MemberID = member
		pub := NewPublisher(bus.Connect(t, "pub"), c, nil, quietLogger())
		pub.Start()
		t.Cleanup(func() { _ = pub.Stop(context.Background()) })
		pubs = append(pubs, pub)
	}
	return pubs
}

// TestTurnsNextCheck: an idle standby next looks at its turn when, hearing nothing more, it would be its turn,
// or when its next standby heartbeat is due, whichever comes first.
func TestTurnsNextCheck(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name                                string
		lowerSeen, lowerStandbySeen, beatAt int // ms after base; -1: never
		want                                time.Time
	}{
		{"the sender heard 200 ms ago", 800, -1, 500, at(1800)},
		{"a standby heartbeat is due first", 800, -1, -500, at(1500)},
		{"a lower standby holds it longer", 800, 0, 500, at(2500)},
		{"it never sent a standby heartbeat", 800, -1, -1, time.Unix(0, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &turns{takeover: time.Second}
			if tt.lowerSeen >= 0 {
				tr.lowerSeen.Store(at(tt.lowerSeen).UnixNano())
			}
			if tt.lowerStandbySeen >= 0 {
				tr.lowerStandbySeen.Store(at(tt.lowerStandbySeen).UnixNano())
			}
			if tt.beatAt != -1 {
				tr.lastStandbyBeat = at(tt.beatAt)
			}
			if got := tr.nextCheck(); !got.Equal(tt.want) {
				t.Fatalf("nextCheck = %v, want %v", got, tt.want)
			}
		})
	}
}
