package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/cairn-kv/cairn/internal/testing/metricstest"
)

// mixinDir holds a copy of etcd's monitoring mixin (alerts and dashboard queries; see its README).
const mixinDir = "testdata/etcd-mixin"

// mixinNotServed are the series the mixin queries that no process serves, and why (the README says the same).
var mixinNotServed = map[string]string{
	"up": "Prometheus itself writes it for every scrape target; no target serves it, etcd's neither",
}

// selectorRE finds the series a PromQL query selects: a name followed by its label matchers.
var selectorRE = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{`)

// mixinSeries returns the series names the mixin's alert rules and dashboard queries select.
func mixinSeries(t *testing.T) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(mixinDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".libsonnet") {
			return err
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range selectorRE.FindAllStringSubmatch(string(text), -1) {
			if !slices.Contains(names, m[1]) {
				names = append(names, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 15 {
		t.Fatalf("found only %d series in %s: %v", len(names), mixinDir, names)
	}
	slices.Sort(names)
	return names
}

// servedBy says which of the scraped targets serve series name with at least one sample; a histogram's
// name_bucket, name_sum and name_count are served by whoever serves the histogram name.
func servedBy(scraped map[string]metricstest.Families, name string) []string {
	family := name
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			family = base
		}
	}
	var targets []string
	for target, families := range scraped {
		mf, ok := families[family]
		if !ok || len(mf.GetMetric()) == 0 {
			continue
		}
		if family != name && mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		targets = append(targets, target)
	}
	slices.Sort(targets)
	return targets
}

// testEtcdMixin: every series etcd's own monitoring mixin (its Grafana dashboard and Prometheus alerts) queries
// is served by some process of the stack, the client URLs included, except the known exceptions.
func testEtcdMixin(t *testing.T, s *upStack) {
	client := s.client(t)
	ctx := t.Context()
	if _, err := client.Put(ctx, "mixin", "v"); err != nil {
		t.Fatal(err)
	}
	scraped := map[string]metricstest.Families{}
	for _, child := range s.stack(t).Children {
		url := fmt.Sprintf("http://127.0.0.1:%d/metrics", child.Ports["metrics"])
		families, err := metricstest.Scrape(url)
		if err != nil {
			t.Fatalf("%s: %v", child.Name, err)
		}
		scraped[child.Name] = families
	}
	for _, endpoint := range s.endpoints {
		families, err := metricstest.Scrape(endpoint + "/metrics")
		if err != nil {
			t.Fatalf("client URL: %v", err)
		}
		scraped[endpoint] = families
	}
	for _, name := range mixinSeries(t) {
		targets := servedBy(scraped, name)
		why, exception := mixinNotServed[name]
		switch {
		case exception && len(targets) > 0:
			t.Errorf("%s is listed as not served (%s), but %v serve it", name, why, targets)
		case !exception && len(targets) == 0:
			t.Errorf("etcd's mixin queries %s; no process of the stack serves it", name)
		case testing.Verbose() && !exception:
			t.Logf("%s: %v", name, targets)
		}
	}
	// `etcdctl check datascale` reads process_resident_memory_bytes at <client URL>/metrics.
	for _, endpoint := range s.endpoints {
		if v, ok := metricstest.Value(scraped[endpoint], "process_resident_memory_bytes"); !ok || v <= 0 {
			t.Errorf("%s/metrics: process_resident_memory_bytes = %v, %v; want a positive value", endpoint, v, ok)
		}
	}
}
