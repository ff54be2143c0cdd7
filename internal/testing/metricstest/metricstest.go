// Package metricstest checks Prometheus series the way an operator's dashboards read them: by name, type, label
// names and histogram buckets, from a registry in the test process or from a /metrics endpoint.
package metricstest

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are metric families by name.
type Families map[string]*dto.MetricFamily

// Gather reads every family of g.
func Gather(t testing.TB, g prometheus.Gatherer) Families {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	out := Families{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// Scrape reads the Prometheus text format served at url (a /metrics endpoint).
func Scrape(url string) (Families, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: parse: %w", url, err)
	}
	return mfs, nil
}

// Want is a series as etcd defines it.
type Want struct {
	Name string
	Type dto.MetricType
	// Labels are the label names every sample carries, in any order.
	Labels []string
	// Buckets, for a histogram, are its upper bounds (without +Inf).
	Buckets []float64
	// Samples is the fewest samples the family must have (default 1): a vector with no child is not served.
	Samples int
}

// Check reports, for each want, what differs in families: missing, another type, other labels or buckets.
func Check(families Families, want Want) error {
	mf, ok := families[want.Name]
	if !ok {
		return fmt.Errorf("%s: not served", want.Name)
	}
	if mf.GetType() != want.Type {
		return fmt.Errorf("%s: type %s, want %s", want.Name, mf.GetType(), want.Type)
	}
	if n := max(want.Samples, 1); len(mf.GetMetric()) < n {
		return fmt.Errorf("%s: %d samples, want at least %d", want.Name, len(mf.GetMetric()), n)
	}
	wantLabels := slices.Clone(want.Labels)
	sort.Strings(wantLabels)
	for _, m := range mf.GetMetric() {
		var labels []string
		for _, l := range m.GetLabel() {
			labels = append(labels, l.GetName())
		}
		sort.Strings(labels)
		if !slices.Equal(labels, wantLabels) {
			return fmt.Errorf("%s: labels %v, want %v", want.Name, labels, wantLabels)
		}
		if want.Type != dto.MetricType_HISTOGRAM || want.Buckets == nil {
			continue
		}
		var bounds []float64
		for _, b := range m.GetHistogram().GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) { // the text format lists +Inf, a registry does not
				bounds = append(bounds, b.GetUpperBound())
			}
		}
		if !equalBounds(bounds, want.Buckets) {
			return fmt.Errorf("%s: buckets %v, want %v", want.Name, bounds, want.Buckets)
		}
	}
	return nil
}

// equalBounds compares bucket bounds as their text form does (the text format rounds them).
func equalBounds(got, want []float64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if fmt.Sprint(float32(got[i])) != fmt.Sprint(float32(want[i])) {
			return false
		}
	}
	return true
}

// Value returns the value of the family's only sample (counter, gauge or untyped), or of the sample whose
// labels contain every pair of labels ("name=value").
func Value(families Families, name string, labels ...string) (float64, bool) {
	mf, ok := families[name]
	if !ok {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for _, pair := range pairs {
		name, value, _ := strings.Cut(pair, "=")
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == name && l.GetValue() == value {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Expect fails t for every want that Check does not find in families.
func Expect(t testing.TB, families Families, wants []Want) {
	t.Helper()
	for _, w := range wants {
		if err := Check(families, w); err != nil {
			t.Error(err)
		}
	}
}
