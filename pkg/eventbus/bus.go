package eventbus

import (
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultSubjectPrefix is the subject prefix when none is configured; give each cluster sharing one NATS its own.
const DefaultSubjectPrefix = "cairn"

// Header names set on every published record.
const (
	HeaderIndex    = "Cairn-Index"
	HeaderRevision = "Cairn-Revision"
	HeaderMember   = "Cairn-Member"
)

// Subject is the subject a member publishes its records on.
func Subject(prefix string, memberID uint64) string {
	return fmt.Sprintf("%s.applied.%x", prefixOrDefault(prefix), memberID)
}

// AllSubjects is the wildcard subject that matches every member's records.
func AllSubjects(prefix string) string { return prefixOrDefault(prefix) + ".applied.*" }

func prefixOrDefault(prefix string) string {
	if prefix == "" {
		return DefaultSubjectPrefix
	}
	return prefix
}

// Connect dials NATS at url (comma-separated for a cluster) with the options a long-running Cairn service
// wants: reconnect forever with jittered waits, and connection state changes logged.
func Connect(url, name string, logger *slog.Logger) (*nats.Conn, error) {
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(true),
		nats.PingInterval(5*time.Second),
		nats.MaxPingsOutstanding(3),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
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
	)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", url, err)
	}
	return nc, nil
}

// Meta is what a consumer learns of a record from its headers, without decoding the body.
type Meta struct {
	Index    uint64
	Revision int64
	Member   uint64
	// Trace is the W3C trace context of the storage apply span (traceparent, tracestate), if any.
	Trace map[string]string
}

func metaOf(h nats.Header) Meta {
	var m Meta
	m.Index, _ = strconv.ParseUint(h.Get(HeaderIndex), 10, 64)
	m.Revision, _ = strconv.ParseInt(h.Get(HeaderRevision), 10, 64)
	m.Member, _ = strconv.ParseUint(h.Get(HeaderMember), 16, 64)
	for _, k := range []string{"traceparent", "tracestate", "baggage"} {
		if v := h.Get(k); v != "" {
			if m.Trace == nil {
				m.Trace = map[string]string{}
			}
			m.Trace[k] = v
		}
	}
	return m
}
