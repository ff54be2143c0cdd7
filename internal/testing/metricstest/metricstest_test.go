package metricstest

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// TestCheck: Check finds a served series and names what differs, from a registry and from its text format.
func TestCheck(t *testing.T) {
	reg := prometheus.NewRegistry()
	sent := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sent_total", Help: "h"}, []string{"To"})
	sent.WithLabelValues("a").Inc()
	rtt := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rtt_seconds", Help: "h", Buckets: []float64{0.1, 1}})
	reg.MustRegister(sent, rtt, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "empty_total", Help: "h"}, []string{"x"}))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	scraped, err := Scrape(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	counter, histogram := dto.MetricType_COUNTER, dto.MetricType_HISTOGRAM
	tests := []struct {
		want    Want
		wantErr string
	}{
		{Want{Name: "sent_total", Type: counter, Labels: []string{"To"}}, ""},
		{Want{Name: "rtt_seconds", Type: histogram, Buckets: []float64{0.1, 1}}, ""},
		{Want{Name: "missing_total", Type: counter}, "not served"},
		{Want{Name: "sent_total", Type: histogram, Labels: []string{"To"}}, "type COUNTER"},
		{Want{Name: "sent_total", Type: counter, Labels: []string{"From"}}, "labels [To]"},
		{Want{Name: "sent_total", Type: counter, Labels: []string{"To"}, Samples: 2}, "1 samples"},
		{Want{Name: "rtt_seconds", Type: histogram, Buckets: []float64{0.1, 2}}, "buckets"},
		{Want{Name: "empty_total", Type: counter, Labels: []string{"x"}}, "not served"}, // a vector with no child
	}
	for name, families := range map[string]Families{"registry": Gather(t, reg), "text": scraped} {
		for _, tc := range tests {
			err := Check(families, tc.want)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("%s: Check(%+v) = %v, want an error containing %q", name, tc.want, err, tc.wantErr)
			}
		}
		if v, ok := Value(families, "sent_total", "To=a"); !ok || v != 1 {
			t.Errorf("%s: Value(sent_total, To=a) = %v, %v; want 1", name, v, ok)
		}
	}
}
