package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/eventpb"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// busRecords follows the stack's NATS: every copy of every applied record, and the lease subjects.
type busRecords struct {
	mu         sync.Mutex
	revisions  map[int64][]uint64 // revision → members that sent a record ending at it
	leaseGrant map[int64]bool     // lease IDs whose grant the lease subject carried
}

func followBus(t *testing.T, s *upStack) *busRecords {
	t.Helper()
	// The bus is locked down: a watchhub's credentials read applied records, a leasekeeper's lease changes.
	nc, leases := s.busClient(t, eventbus.RoleWatchhub), s.busClient(t, eventbus.RoleLeasekeeper)
	b := &busRecords{revisions: map[int64][]uint64{}, leaseGrant: map[int64]bool{}}
	if _, err := eventbus.Subscribe(nc, "", func(rec *eventpb.AppliedRecord, _ eventbus.Meta) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.revisions[rec.GetRevision()] = append(b.revisions[rec.GetRevision()], rec.GetMemberId())
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := eventbus.SubscribeLeaseChanges(leases, "", func(rec *eventpb.AppliedRecord, _ eventbus.Meta) {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range rec.GetLeases() {
			if c.GetType() == eventpb.LeaseChange_GRANTED {
				b.leaseGrant[c.GetId()] = true
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*nats.Conn{nc, leases} {
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// The storages publish applied records only while a consumer says it needs them, as watchhubs with
	// watch streams do.
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			_ = eventbus.AnnounceInterest(nc, "")
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	waittest.Until(t, 10*time.Second, 100*time.Millisecond, "every storage told records are wanted", func() bool {
		for _, name := range []string{"storage-1", "storage-2", "storage-3"} {
			if v, ok := s.metric(t, name, "cairn_eventbus_records_wanted"); !ok || v != 1 {
				return false
			}
		}
		return true
	})
	return b
}

// busURL is the stack's NATS.
func (s *upStack) busURL(t *testing.T) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", s.child(t, "nats").Ports["client"])
}

// busClient connects to a plain stack's bus with role's credentials, as the stack's processes of that role do;
// errors the server reports (permission violations) are logged.
func (s *upStack) busClient(t *testing.T, role string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{eventbus.NkeySeedFile(eventbus.SeedFile(filepath.Join(s.dir, "nats"), role))}, opts...)
	nc, err := eventbus.Connect(s.busURL(t), "e2e-"+role, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// testPlainBusLockedDown: a plain `cairn up` runs its bus locked down by role nkeys: an anonymous client is
// refused, a watchhub's credentials cannot publish applied records, a record forged with them never reaches a
// watcher, and NATS counts each refusal.
func testPlainBusLockedDown(t *testing.T, s *upStack) {
	for _, role := range eventbus.Roles() {
		if info, err := os.Stat(eventbus.SeedFile(filepath.Join(s.dir, "nats"), role)); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s's nkey seed: %v; want a file of mode 0600", role, err)
		}
	}
	violations := func(kind string) float64 {
		v, _ := s.metric(t, "nats", fmt.Sprintf(`cairn_nats_authorization_violations_total{kind=%q}`, kind))
		return v
	}
	connectsBefore, publishesBefore := violations(eventbus.ViolationConnect), violations(eventbus.ViolationPublish)
	if nc, err := nats.Connect(s.busURL(t), nats.MaxReconnects(0), nats.Timeout(3*time.Second)); err == nil {
		nc.Close()
		t.Error("an anonymous client connected to the bus of a plain cairn up")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(t)
	events := c.Watch(ctx, "forged/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	// The put waits for the created response: one applied before the hub creates the watch is not its event.
	if resp := <-events; !resp.Created || resp.Canceled {
		t.Fatalf("watch on forged/: %+v (err %v), want created", resp, resp.Err())
	}
	status, err := c.Put(ctx, "forged/before", "real")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan error, 4)
	hub := s.busClient(t, eventbus.RoleWatchhub, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		refused <- err
	}))
	forged := &eventpb.AppliedBatch{Records: []*eventpb.AppliedRecord{{MemberId: 1, Index: 1 << 40, Revision: status.Header.Revision + 1,
		Events: []*mvccpb.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("forged/key"), Value: []byte("forged"),
			CreateRevision: status.Header.Revision + 1, ModRevision: status.Header.Revision + 1, Version: 1}}}}}}
	body, err := proto.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(eventbus.Subject("", 1))
	msg.Data = body
	msg.Header.Set(eventbus.HeaderMember, "1")
	msg.Header.Set(eventbus.HeaderFirstIndex, fmt.Sprint(uint64(1<<40)))
	msg.Header.Set(eventbus.HeaderIndex, fmt.Sprint(uint64(1<<40)))
	msg.Header.Set(eventbus.HeaderRevision, fmt.Sprint(status.Header.Revision+1))
	if err := hub.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-refused:
		if !strings.Contains(err.Error(), "Permissions Violation") {
			t.Errorf("the forged publish was refused with %v, want a permissions violation", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("NATS did not refuse a watchhub's publish of an applied record")
	}
	if _, err := c.Put(ctx, "forged/after", "real"); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for len(seen) < 2 {
		resp, ok := <-events
		if !ok {
			t.Fatalf("watch ended after %q: %v", seen, ctx.Err())
		}
		for _, ev := range resp.Events {
			seen = append(seen, string(ev.Kv.Key))
		}
	}
	if !slices.Equal(seen, []string{"forged/before", "forged/after"}) {
		t.Errorf("the watcher saw %q, want only the two real puts", seen)
	}
	waittest.Until(t, 10*time.Second, 100*time.Millisecond, "NATS counted the refusals", func() bool {
		return violations(eventbus.ViolationConnect) > connectsBefore && violations(eventbus.ViolationPublish) > publishesBefore
	})
}

// senders returns who sent the record ending at revision.
func (b *busRecords) senders(revision int64) []uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.revisions[revision])
}

func (b *busRecords) granted(id int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leaseGrant[id]
}

// activePublishers names the storages whose publisher reports its turn.
func (s *upStack) activePublishers(t *testing.T) []string {
	var active []string
	for _, name := range []string{"storage-1", "storage-2", "storage-3"} {
		if v, ok := s.metric(t, name, "cairn_eventbus_publisher_active"); ok && v == 1 {
			active = append(active, name)
		}
	}
	return active
}

// testAppliedRecordsOnNATS checks the storage → NATS wiring of `cairn up`: the storages take turns, so one member
// (the lowest ID) publishes each applied record once on the stack's NATS; a lease grant also goes on the lease
// subjects; and when the publishing storage is killed -9 in the middle of writes, another takes over and every
// acknowledged write's record still reaches the bus.
func testAppliedRecordsOnNATS(t *testing.T, s *upStack) {
	bus := followBus(t, s)
	waittest.Until(t, 10*time.Second, 100*time.Millisecond, "one storage publishing", func() bool {
		return len(s.activePublishers(t)) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.client(t)
	members, err := c.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lowest := members.Members[0].ID
	for _, m := range members.Members {
		lowest = min(lowest, m.ID)
	}
	put, err := c.Put(ctx, "bus/key", "on the bus")
	if err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, 100*time.Millisecond, "the put's record", func() bool {
		return len(bus.senders(put.Header.Revision)) > 0
	})
	time.Sleep(200 * time.Millisecond) // room for a copy that should not come
	if got := bus.senders(put.Header.Revision); len(got) != 1 || got[0] != lowest {
		t.Fatalf("the put's record was sent by members %x, want once by the lowest member %x", got, lowest)
	}
	lease, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, 100*time.Millisecond, "the lease grant on the lease subjects", func() bool {
		return bus.granted(int64(lease.ID))
	})

	publisher := s.activePublishers(t)[0]
	before := s.child(t, publisher)
	var acked []int64
	for i := range 200 {
		if i == 50 {
			if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
				t.Fatalf("kill -9 %s (%d): %v", publisher, before.PID, err)
			}
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.Put(wctx, fmt.Sprintf("bus/crash/%d", i), "v")
		wcancel()
		if err == nil {
			acked = append(acked, resp.Header.Revision)
		}
	}
	waittest.Until(t, time.Minute, 100*time.Millisecond, "every acknowledged write's record on the bus", func() bool {
		for _, rev := range acked {
			if len(bus.senders(rev)) == 0 {
				return false
			}
		}
		return true
	})
	waittest.Until(t, time.Minute, 100*time.Millisecond, publisher+" restarted and ready", func() bool {
		now := s.child(t, publisher)
		return now.Restarts > before.Restarts && now.Ready
	})
	waittest.Until(t, 10*time.Second, 100*time.Millisecond, "one storage publishing again", func() bool {
		return len(s.activePublishers(t)) == 1
	})
}
