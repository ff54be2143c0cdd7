package eventbus

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// lockedBus is a NATS server locked down with a CA of its own, and links for each role (and for a
// certificate of the CA that names no role, and one of another CA).
type lockedBus struct {
	srv   *Embedded
	roles map[string]*tlsconfig.Link
	log   *syncWriter
}

func startLockedBus(t *testing.T) *lockedBus {
	t.Helper()
	dir, otherDir := t.TempDir(), t.TempDir()
	ca, err := tlsconfig.LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlsconfig.LoadOrCreateCA(otherDir)
	if err != nil {
		t.Fatal(err)
	}
	link := func(ca *tlsconfig.CA, id tlsconfig.Identity) *tlsconfig.Link {
		id.Hosts = []string{"127.0.0.1", "localhost"}
		files, err := ca.Issue(id)
		if err != nil {
			t.Fatal(err)
		}
		l, err := tlsconfig.NewLink(tlsconfig.KindInternal, files, tlsconfig.Policy{}, tlsconfig.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	b := &lockedBus{roles: map[string]*tlsconfig.Link{}, log: &syncWriter{w: &bytes.Buffer{}}}
	for _, role := range []string{RoleStorage, RoleWatchhub, RoleLeasekeeper} {
		b.roles[role] = link(ca, tlsconfig.Identity{Name: role, URIs: []string{RoleURI(role)}})
	}
	b.roles["no role"] = link(ca, tlsconfig.Identity{Name: "stranger"})
	foreign := link(other, tlsconfig.Identity{Name: "storage", URIs: []string{RoleURI(RoleStorage)}})
	b.roles["another CA"] = foreign
	logger := slog.New(slog.NewTextHandler(b.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if b.srv, err = StartEmbedded(EmbeddedConfig{Host: "127.0.0.1", Port: -1,
		TLS: link(ca, tlsconfig.Identity{Name: "nats"}), Logger: logger}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.srv.Shutdown)
	return b
}

// connect connects as role ("" for no TLS at all), failing fast.
func (b *lockedBus) connect(role string, errs chan<- error) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(role), nats.MaxReconnects(0), nats.Timeout(2 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errs != nil {
				errs <- err
			}
		})}
	if role != "" {
		opts = append(opts, nats.Secure(b.roles[role].ClientConfig()))
	}
	return nats.Connect(b.srv.ClientURL(), opts...)
}

// TestLockedBusRefusesStrangers: a client without TLS, with a certificate of another CA, or with one of the
// CA that names no role cannot connect; the server says why in its log.
func TestLockedBusRefusesStrangers(t *testing.T) {
	b := startLockedBus(t)
	for _, who := range []string{"", "another CA", "no role"} {
		if nc, err := b.connect(who, nil); err == nil {
			nc.Close()
			t.Errorf("client %q connected to the locked-down bus", who)
		}
	}
	for _, role := range []string{RoleStorage, RoleWatchhub, RoleLeasekeeper} {
		nc, err := b.connect(role, nil)
		if err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		nc.Close()
	}
	waittest.Until(t, 5*time.Second, 10*time.Millisecond, "the refusals in the server's log", func() bool {
		log := b.log.String()
		return strings.Contains(log, "Authorization Error") || strings.Contains(log, "authentication error")
	})
}

// TestLockedBusPermissions: only a storage's records reach a watchhub (a leasekeeper's forged record on an
// applied subject is refused by the server, never delivered), only watchhubs read applied records, and only
// watchhubs announce interest.
func TestLockedBusPermissions(t *testing.T) {
	b := startLockedBus(t)
	errs := make(chan error, 16)
	hub, err := b.connect(RoleWatchhub, errs)
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	keeper, err := b.connect(RoleLeasekeeper, errs)
	if err != nil {
		t.Fatal(err)
	}
	defer keeper.Close()
	store, err := b.connect(RoleStorage, errs)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	var mu sync.Mutex
	var hubGot, keeperGot, interest []string
	record := func(list *[]string) nats.MsgHandler {
		return func(m *nats.Msg) { mu.Lock(); *list = append(*list, string(m.Data)); mu.Unlock() }
	}
	if _, err := hub.Subscribe(AllSubjects(""), record(&hubGot)); err != nil {
		t.Fatal(err)
	}
	if _, err := keeper.Subscribe(AllSubjects(""), record(&keeperGot)); err != nil { // refused by the server
		t.Fatal(err)
	}
	if _, err := store.Subscribe(InterestSubject(""), record(&interest)); err != nil {
		t.Fatal(err)
	}
	for _, nc := range []*nats.Conn{hub, keeper, store} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	_ = keeper.Publish(Subject("", 1), []byte("forged by a leasekeeper"))
	_ = hub.Publish(Subject("", 1), []byte("forged by a watchhub"))
	_ = keeper.Publish(InterestSubject(""), []byte("interest from a leasekeeper"))
	_ = keeper.Flush()
	_ = hub.Flush()
	_ = hub.Publish(InterestSubject(""), []byte("interest from a watchhub"))
	_ = store.Publish(Subject("", 1), []byte("applied by a storage"))
	waittest.Until(t, 5*time.Second, 10*time.Millisecond, "the storage's record at the watchhub", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(hubGot) > 0 && len(interest) > 0
	})
	_ = keeper.Flush() // anything the leasekeeper's refused subscription could get has arrived by now
	mu.Lock()
	defer mu.Unlock()
	if len(hubGot) != 1 || hubGot[0] != "applied by a storage" {
		t.Errorf("the watchhub got %q, want only the storage's record", hubGot)
	}
	if len(keeperGot) != 0 {
		t.Errorf("a leasekeeper read applied records: %q", keeperGot)
	}
	if len(interest) != 1 || interest[0] != "interest from a watchhub" {
		t.Errorf("the storages got interest %q, want only the watchhub's", interest)
	}
	var violations int
	for len(errs) > 0 {
		if err := <-errs; strings.Contains(err.Error(), "Permissions Violation") {
			violations++
		}
	}
	if violations == 0 {
		t.Error("no permissions violation reported to the clients")
	}
}

// syncWriter serializes writes to w (the server logs from several goroutines).
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
