package obs

import (
	"context"
	"os"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestNewSampler(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		ratio       float64
		description string // of the sampler under the link rule; empty: an error is expected
	}{
		{"default", nil, -1, "ParentBased{root:AlwaysOnSampler"},
		{"flag", nil, 0.25, "ParentBased{root:TraceIDRatioBased{0.25}"},
		{"flag wins over env", map[string]string{envSampler: "always_off"}, 0.5, "ParentBased{root:TraceIDRatioBased{0.5}"},
		{"flag out of range", nil, 2, ""},
		{"env always_off", map[string]string{envSampler: "always_off"}, -1, "AlwaysOffSampler"},
		{"env parent-based ratio", map[string]string{envSampler: "parentbased_traceidratio", envSamplerArg: "0.01"}, -1,
			"ParentBased{root:TraceIDRatioBased{0.01}"},
		{"env ratio without arg", map[string]string{envSampler: "traceidratio"}, -1, "TraceIDRatioBased{1}"},
		{"env bad arg", map[string]string{envSampler: "traceidratio", envSamplerArg: "lots"}, -1, ""},
		{"env unknown", map[string]string{envSampler: "jaeger_remote"}, -1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envSampler, "")
			t.Setenv(envSamplerArg, "")
			unsetEnv(t, envSampler, envSamplerArg)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			s, err := NewSampler(tc.ratio)
			if tc.description == "" {
				if err == nil {
					t.Fatalf("sampler %s, want an error", s.Description())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(s.Description(), tc.description) {
				t.Fatalf("sampler %s, want %s", s.Description(), tc.description)
			}
		})
	}
}

// TestLinkedRootsAreSampled: a batch span (a root linked to the requests it carries) is sampled when one of
// them is, whatever the ratio; a root linked to none is left to the ratio.
func TestLinkedRootsAreSampled(t *testing.T) {
	s, err := NewSampler(0)
	if err != nil {
		t.Fatal(err)
	}
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1},
		TraceFlags: trace.FlagsSampled})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{2}})
	tests := []struct {
		name  string
		links []trace.Link
		want  sdktrace.SamplingDecision
	}{
		{"no link", nil, sdktrace.Drop},
		{"unsampled link", []trace.Link{{SpanContext: unsampled}}, sdktrace.Drop},
		{"a sampled link", []trace.Link{{SpanContext: unsampled}, {SpanContext: sampled}}, sdktrace.RecordAndSample},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(),
				TraceID: trace.TraceID{3}, Name: "batch", Links: tc.links})
			if got.Decision != tc.want {
				t.Fatalf("decision %v, want %v", got.Decision, tc.want)
			}
		})
	}
}

// unsetEnv unsets keys for the test; the caller has t.Setenv'd them first, which restores them after.
func unsetEnv(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if err := os.Unsetenv(k); err != nil {
			t.Fatal(err)
		}
	}
}
