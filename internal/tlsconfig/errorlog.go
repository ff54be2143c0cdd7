package tlsconfig

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// httpHandshakeError starts the line net/http's server logs for every handshake it refuses (plain text, no
// certificate, another CA's): the one report net/http gives of a refused handshake on its TLS listener.
const httpHandshakeError = "http: TLS handshake error"

// HTTPErrorLog is the ErrorLog of a net/http server that does its own TLS on a link of kind (KindClient: the
// frontends' client port): its lines go to logger at warning level, and each refused handshake among them
// is counted in cairn_tls_handshake_failures_total{link=kind,side="server"}. net/http must do the handshake
// itself (a listener that wrapped its connections would hide the *tls.Conn it negotiates HTTP/2 on), and its
// log line is the only report it gives of a refusal, so the count hooks the log.
func HTTPErrorLog(kind string, logger *slog.Logger, reg prometheus.Registerer) (*log.Logger, error) {
	failures, err := HandshakeFailures(reg)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &errorLogWriter{logger: logger, kind: kind, failures: failures.WithLabelValues(kind, "server")}
	return log.New(w, "", 0), nil
}

type errorLogWriter struct {
	logger   *slog.Logger
	kind     string
	failures prometheus.Counter
}

func (w *errorLogWriter) Write(line []byte) (int, error) {
	msg := string(bytes.TrimSpace(line))
	if bytes.HasPrefix(line, []byte(httpHandshakeError)) {
		w.failures.Inc()
		msg = fmt.Sprintf("TLS handshake refused (%s)", msg)
	}
	w.logger.Log(context.Background(), slog.LevelWarn, msg, "link", w.kind, "side", "server")
	return len(line), nil
}
