package eventbus

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// DefaultSubjectPrefix is the subject prefix when none is configured; give each cluster sharing one NATS its own.
const DefaultSubjectPrefix = "cairn"

// Header names set on every bus message (an eventpb.AppliedBatch): the index of its first and last record,
// the revision after its last record, and the publishing member (hex).
const (
	HeaderFirstIndex = "Cairn-First-Index"
	HeaderIndex      = "Cairn-Index"
	HeaderRevision   = "Cairn-Revision"
	HeaderMember     = "Cairn-Member"
)

// HeaderStandby marks a publisher's heartbeat sent while it stands by (see PublisherConfig.TakeTurns).
const HeaderStandby = "Cairn-Standby"

// Subject is the subject a member publishes its records on.
func Subject(prefix string, memberID uint64) string {
	return fmt.Sprintf("%s.applied.%x", prefixOrDefault(prefix), memberID)
}

// AllSubjects is the wildcard subject that matches every member's records.
func AllSubjects(prefix string) string { return prefixOrDefault(prefix) + ".applied.*" }

// LeaseSubject is the subject a member publishes the lease changes of its records on (eventpb.LeaseBatch).
func LeaseSubject(prefix string, memberID uint64) string {
	return fmt.Sprintf("%s.leases.%x", prefixOrDefault(prefix), memberID)
}

// AllLeaseSubjects is the wildcard subject that matches every member's lease changes.
func AllLeaseSubjects(prefix string) string { return prefixOrDefault(prefix) + ".leases.*" }

// HeartbeatSubject is where publishers taking turns say they are sending (PublisherConfig.TakeTurns).
func HeartbeatSubject(prefix string) string { return prefixOrDefault(prefix) + ".publisher" }

// InterestSubject is where consumers of the applied records say they need them (PublisherConfig.OnlyWhenWanted).
func InterestSubject(prefix string) string { return prefixOrDefault(prefix) + ".interest" }

// AnnounceInterest tells the publishers that a consumer needs the applied records; a consumer that does repeats
// it well within DefaultInterestTTL.
func AnnounceInterest(nc *nats.Conn, prefix string) error {
	if err := nc.Publish(InterestSubject(prefix), nil); err != nil {
		return fmt.Errorf("eventbus: announce interest: %w", err)
	}
	return nil
}

func prefixOrDefault(prefix string) string {
	if prefix == "" {
		return DefaultSubjectPrefix
	}
	return prefix
}

// Connect dials NATS at url (comma-separated for a cluster) with the options a long-running Cairn service
// wants: reconnect forever with jittered waits, and connection state changes logged. With secure (not nil)
// the connection is TLS with the process's certificate, whose role (RoleURI) decides what it may publish and
// subscribe on a locked-down bus. opts come after those (e.g. nats.SetCustomDialer).
func Connect(url, name string, logger *slog.Logger, secure *tlsconfig.Link, opts ...nats.Option) (*nats.Conn, error) {
	options := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(true),
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil { // this process closed the connection: not a disconnection to warn of
				logger.Debug("nats connection closed", "url", url)
				return
			}
			logger.Warn("nats disconnected", "url", url, "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { logger.Info("nats reconnected", "url", c.ConnectedUrl()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			logger.Warn("nats error", "subject", subject, "err", err)
		}),
	}
	if secure.Enabled() {
		options = append(options, nats.Secure(secure.ClientConfig()))
	}
	nc, err := nats.Connect(url, append(options, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", url, err)
	}
	return nc, nil
}

// DialWith makes a connection reach the servers (host:port) through dial instead of TCP, e.g. an in-memory
// network's in tests that run on a fake clock.
func DialWith(dial func(ctx context.Context, addr string) (net.Conn, error)) nats.Option {
	return nats.SetCustomDialer(dialerFunc(dial))
}

// dialerFunc is a context dialer as nats.go's CustomDialer.
type dialerFunc func(ctx context.Context, addr string) (net.Conn, error)

func (d dialerFunc) Dial(_, addr string) (net.Conn, error) { return d(context.Background(), addr) }

// Meta is what a consumer learns of a record besides its body: where it sits and who published it.
type Meta struct {
	Index    uint64
	Revision int64
	Member   uint64
	// Trace is the W3C trace context of the storage apply span (traceparent, tracestate), if any.
	Trace map[string]string
}

// batchHeaders is what a message's headers say of its batch, read before the body is decoded.
type batchHeaders struct {
	member      uint64
	first, last uint64
}

func headersOf(h nats.Header) batchHeaders {
	var b batchHeaders
	b.member, _ = strconv.ParseUint(h.Get(HeaderMember), 16, 64)
	b.first, _ = strconv.ParseUint(h.Get(HeaderFirstIndex), 10, 64)
	b.last, _ = strconv.ParseUint(h.Get(HeaderIndex), 10, 64)
	return b
}
