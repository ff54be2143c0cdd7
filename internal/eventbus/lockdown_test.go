package eventbus

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// lockedBus is a locked-down NATS server and the options each client connects with: one per role, and the
// strangers that must be refused.
type lockedBus struct {
	srv       *Embedded
	who       map[string][]nats.Option
	strangers []string
	log       *syncWriter
	registry  *prometheus.Registry
}

// lockdowns are the two ways a bus is locked down: role certificates over TLS (`cairn up --tls`), and role
// nkeys on a plain bus (a plain `cairn up`).
var lockdowns = map[string]func(t *testing.T) *lockedBus{
	"certificates": startCertBus,
	"nkeys":        startNkeyBus,
}

func newLockedBus() *lockedBus {
	return &lockedBus{who: map[string][]nats.Option{}, log: &syncWriter{w: &bytes.Buffer{}},
		registry: prometheus.NewRegistry()}
}

func (b *lockedBus) start(t *testing.T, cfg EmbeddedConfig) {
	t.Helper()
	cfg.Host, cfg.Port, cfg.Registry = "127.0.0.1", -1, b.registry
	cfg.Logger = slog.New(slog.NewTextHandler(b.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var err error
	if b.srv, err = StartEmbedded(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.srv.Shutdown)
}

// startCertBus locks a bus down with a CA of its own: a certificate per role, one of the CA that names no
// role, one of another CA, and a client without TLS are the strangers.
func startCertBus(t *testing.T) *lockedBus {
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
	b := newLockedBus()
	for _, role := range Roles() {
		b.who[role] = []nats.Option{nats.Secure(link(ca, tlsconfig.Identity{Name: role, URIs: []string{RoleURI(role)}}).ClientConfig())}
	}
	b.who["no role"] = []nats.Option{nats.Secure(link(ca, tlsconfig.Identity{Name: "stranger"}).ClientConfig())}
	b.who["another CA"] = []nats.Option{nats.Secure(link(other, tlsconfig.Identity{Name: "storage", URIs: []string{RoleURI(RoleStorage)}}).ClientConfig())}
	b.strangers = []string{"", "another CA", "no role"}
	b.start(t, EmbeddedConfig{TLS: link(ca, tlsconfig.Identity{Name: "nats"})})
	return b
}

// startNkeyBus locks a plain bus down with role nkeys: a client without credentials and one with an nkey
// the bus does not know are the strangers.
func startNkeyBus(t *testing.T) *lockedBus {
	t.Helper()
	dir, otherDir := t.TempDir(), t.TempDir()
	keys, err := LoadOrCreateRoleKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateRoleKeys(otherDir); err != nil {
		t.Fatal(err)
	}
	b := newLockedBus()
	for _, role := range Roles() {
		b.who[role] = []nats.Option{NkeySeedFile(SeedFile(dir, role))}
	}
	b.who["unknown nkey"] = []nats.Option{NkeySeedFile(SeedFile(otherDir, RoleStorage))}
	b.strangers = []string{"", "unknown nkey"}
	b.start(t, EmbeddedConfig{RoleKeys: keys})
	return b
}

// connect connects as who ("" for a client with no credentials and no TLS), failing fast.
func (b *lockedBus) connect(who string, errs chan<- error) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(who), nats.MaxReconnects(0), nats.Timeout(2 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errs != nil {
				errs <- err
			}
		})}
	return nats.Connect(b.srv.ClientURL(), append(opts, b.who[who]...)...)
}

// violations is cairn_nats_authorization_violations_total{kind}.
func (b *lockedBus) violations(t *testing.T, kind string) float64 {
	t.Helper()
	families, err := b.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range families {
		if family.GetName() != "cairn_nats_authorization_violations_total" {
			continue
		}
		for _, m := range family.GetMetric() {
			if m.GetLabel()[0].GetValue() == kind {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestLockedBusRefusesStrangers: a client that proves no role cannot connect; the server says why in its
// log, and each refusal is counted (TLS handshake failures for a plain-text client on a TLS bus).
func TestLockedBusRefusesStrangers(t *testing.T) {
	for name, start := range lockdowns {
		t.Run(name, func(t *testing.T) {
			b := start(t)
			for _, who := range b.strangers {
				if nc, err := b.connect(who, nil); err == nil {
					nc.Close()
					t.Errorf("client %q connected to the locked-down bus", who)
				}
			}
			for _, role := range Roles() {
				nc, err := b.connect(role, nil)
				if err != nil {
					t.Fatalf("%s: %v", role, err)
				}
				nc.Close()
			}
			waittest.Until(t, 5*time.Second, 10*time.Millisecond, "every refusal counted and logged", func() bool {
				refused := b.violations(t, ViolationConnect)
				if name == "certificates" { // the plain-text client fails the handshake, the others authentication
					handshakes, err := tlsconfig.HandshakeFailures(b.registry)
					if err != nil {
						t.Fatal(err)
					}
					refused += testutil.ToFloat64(handshakes.WithLabelValues(tlsconfig.KindNATS, "server"))
				}
				log := b.log.String()
				return int(refused) == len(b.strangers) &&
					(strings.Contains(log, "Authorization Error") || strings.Contains(log, "authentication error"))
			})
		})
	}
}

// TestLockedBusPermissions: only a storage's records reach a watchhub (a leasekeeper's or a watchhub's forged
// record on an applied subject is refused by the server, never delivered), only watchhubs read applied
// records, and only watchhubs announce interest; every refused publish and subscribe is counted.
func TestLockedBusPermissions(t *testing.T) {
	for name, start := range lockdowns {
		t.Run(name, func(t *testing.T) { testLockedBusPermissions(t, start(t)) })
	}
}

func testLockedBusPermissions(t *testing.T, b *lockedBus) {
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
	// Refused: the keeper's subscription; the keeper's two publishes and the hub's one.
	if got := b.violations(t, ViolationSubscribe); got != 1 {
		t.Errorf("subscribe violations counted: %v, want 1", got)
	}
	if got := b.violations(t, ViolationPublish); got != 3 {
		t.Errorf("publish violations counted: %v, want 3", got)
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
