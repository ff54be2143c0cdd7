package eventbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// Kinds of authorization violation, the kind label of cairn_nats_authorization_violations_total.
const (
	ViolationConnect   = "connect"   // a client that proved no role (no or a wrong nkey, a certificate naming none)
	ViolationPublish   = "publish"   // a role publishing where it may not
	ViolationSubscribe = "subscribe" // a role subscribing where it may not
)

// refusalLogger is nats-server's logger: it writes the server's lines to a slog.Logger and counts the
// refusals among them. The log is the hook because it is the one place nats-server reports every kind of
// refusal: TLS handshake failures are only logged (no event, no Varz counter), and the system account's
// $SYS...CLIENT.AUTH.ERR events cover failed authentication only, not publish or subscribe violations, and
// need a system-account client of their own. The lines matched are the server's fixed texts: its
// ErrAuthentication, "TLS handshake error", "Publish Violation" and "Subscription Violation".
type refusalLogger struct {
	logger     *slog.Logger
	handshakes prometheus.Counter
	violations *prometheus.CounterVec
}

func newRefusalLogger(logger *slog.Logger, reg prometheus.Registerer) (*refusalLogger, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	handshakes, err := tlsconfig.HandshakeFailures(reg)
	if err != nil {
		return nil, err
	}
	violations := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_nats_authorization_violations_total",
		Help: "Clients the bus refused, by kind: connect (proved no role), publish or subscribe (outside the role's permissions).",
	}, []string{"kind"})
	if reg != nil {
		if err := reg.Register(violations); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, fmt.Errorf("eventbus: register metrics: %w", err)
			}
			violations = already.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	for _, kind := range []string{ViolationConnect, ViolationPublish, ViolationSubscribe} {
		violations.WithLabelValues(kind) // exported at 0 before the first refusal
	}
	return &refusalLogger{logger: logger.With("component", "nats"),
		handshakes: handshakes.WithLabelValues(tlsconfig.KindNATS, "server"), violations: violations}, nil
}

// count counts line if it reports a refusal, and says whether it did.
func (l *refusalLogger) count(line string) bool {
	switch {
	case strings.Contains(line, "TLS handshake error"):
		l.handshakes.Inc()
	case strings.Contains(line, server.ErrAuthentication.Error()):
		l.violations.WithLabelValues(ViolationConnect).Inc()
	case strings.Contains(line, "Publish Violation"):
		l.violations.WithLabelValues(ViolationPublish).Inc()
	case strings.Contains(line, "Subscription Violation"):
		l.violations.WithLabelValues(ViolationSubscribe).Inc()
	default:
		return false
	}
	return true
}

func (l *refusalLogger) log(level slog.Level, format string, v []any) {
	// Refusals come as errors, but a plain-text client on the TLS port is a "probe" to nats-server, logged
	// at debug level; any other line is formatted only when the logger wants it.
	maybeRefusal := level >= slog.LevelWarn || strings.Contains(format, "TLS handshake error")
	if !maybeRefusal && !l.logger.Enabled(context.Background(), level) {
		return
	}
	line := fmt.Sprintf(format, v...)
	if l.count(line) && level < slog.LevelWarn {
		level = slog.LevelWarn // a refusal is worth a line, even one the server logs as a probe
	}
	l.logger.Log(context.Background(), level, line)
}

func (l *refusalLogger) Noticef(format string, v ...any) { l.log(slog.LevelInfo, format, v) }
func (l *refusalLogger) Warnf(format string, v ...any)   { l.log(slog.LevelWarn, format, v) }
func (l *refusalLogger) Fatalf(format string, v ...any)  { l.log(slog.LevelError, format, v) }
func (l *refusalLogger) Errorf(format string, v ...any)  { l.log(slog.LevelError, format, v) }
func (l *refusalLogger) Debugf(format string, v ...any)  { l.log(slog.LevelDebug, format, v) }
func (l *refusalLogger) Tracef(format string, v ...any)  { l.log(slog.LevelDebug, format, v) }
