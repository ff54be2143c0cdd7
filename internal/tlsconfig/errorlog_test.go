package tlsconfig

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestHTTPErrorLogCountsRefusals: net/http's refused-handshake lines are counted and logged as refusals; its
// other lines are only logged.
func TestHTTPErrorLogCountsRefusals(t *testing.T) {
	var out bytes.Buffer
	reg := prometheus.NewRegistry()
	errorLog, err := HTTPErrorLog(KindClient, slog.New(slog.NewTextHandler(&out, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"http: TLS handshake error from 127.0.0.1:5000: client sent an HTTP request to an HTTPS server",
		"http: TLS handshake error from 127.0.0.1:5001: tls: client didn't provide a certificate",
		"http: superfluous response.WriteHeader call",
	} {
		errorLog.Print(line)
	}
	failures, err := HandshakeFailures(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(failures.WithLabelValues(KindClient, "server")); got != 2 {
		t.Errorf("counted %v refusals, want 2", got)
	}
	if got := strings.Count(out.String(), "TLS handshake refused"); got != 2 {
		t.Errorf("logged %d refusals, want 2:\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "superfluous") {
		t.Errorf("the other line was not logged:\n%s", out.String())
	}
}
