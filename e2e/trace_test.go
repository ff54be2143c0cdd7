package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestTraceOnCairnUp: `cairn up --trace` runs a `cairn trace` child that every service exports to, prints its
// page's URL, and the page and the text report show a client's puts, with stages from the frontend, the
// storage and consensus (three processes' spans joined into one trace).
func TestTraceOnCairnUp(t *testing.T) {
	s := startUp(t, t.TempDir(), "--trace", "--members", "1", "--watchhubs", "1", "--leasekeepers", "1")
	httpPort := s.child(t, "trace").Ports["http"]
	pageURL := fmt.Sprintf("http://127.0.0.1:%d/", httpPort)
	if !strings.Contains(s.outputText(), "where the time went: "+pageURL) {
		t.Fatalf("cairn up does not print the trace page %s:\n%s", pageURL, s.outputText())
	}
	client := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 20 {
		if _, err := client.Put(ctx, fmt.Sprintf("trace/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	// The root of a put's trace is the frontend's server span: "put" by its cairn.op, or otelgrpc's name
	// before every service sets it.
	isPut := func(line string) bool {
		return strings.HasPrefix(line, "put: ") || strings.HasPrefix(line, "etcdserverpb.KV/Put: ")
	}
	var report string
	waittest.Until(t, 30*time.Second, 250*time.Millisecond, "the puts' traces in the report", func() bool {
		report = get(t, pageURL+"report.txt")
		for _, line := range strings.Split(report, "\n") {
			var n int
			if _, rest, ok := strings.Cut(line, ": "); ok && isPut(line) {
				if _, err := fmt.Sscanf(rest, "%d traces", &n); err == nil && n >= 20 {
					return true
				}
			}
		}
		return false
	})
	for _, service := range []string{"storage.", "consensus."} {
		if !strings.Contains(report, " "+service) {
			t.Errorf("no %s stage in the report:\n%s", service, report)
		}
	}
	page := get(t, pageURL)
	if !strings.Contains(page, "Where the time went") || !strings.Contains(page, "<svg") {
		t.Errorf("page lacks the stacked bars:\n%.2000s", page)
	}
}

// get returns the body of a GET that must answer 200.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(body)
}
