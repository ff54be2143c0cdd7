package obs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The standard sampler variables, read as the OpenTelemetry SDK reads them (sdk/trace's sampler_env.go), so
// that the flag and the variables are decided in one place.
const (
	envSampler    = "OTEL_TRACES_SAMPLER"
	envSamplerArg = "OTEL_TRACES_SAMPLER_ARG"
)

// NewSampler returns the sampler of a service: parent-based with the root ratio sampleRatio when sampleRatio
// is at least 0 (the --trace-sample-ratio flag, which wins over the environment), else the one
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG name (always_on, always_off, traceidratio,
// parentbased_always_on, parentbased_always_off, parentbased_traceidratio), else the SDK's default,
// parentbased_always_on. Whatever the choice, a span with no parent but with a link to a sampled span (a batch
// carrying a sampled request, see StageTracer.StartBatch) is sampled, so a sampled request's batches are in its
// trace.
func NewSampler(sampleRatio float64) (sdktrace.Sampler, error) {
	base, err := baseSampler(sampleRatio)
	if err != nil {
		return nil, err
	}
	return linkedSampler{base: base}, nil
}

func baseSampler(sampleRatio float64) (sdktrace.Sampler, error) {
	if sampleRatio >= 0 {
		if sampleRatio > 1 {
			return nil, fmt.Errorf("--trace-sample-ratio %v: want a ratio from 0 to 1", sampleRatio)
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sampleRatio)), nil
	}
	name, set := os.LookupEnv(envSampler)
	if !set {
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	}
	ratio := func() (float64, error) {
		arg, set := os.LookupEnv(envSamplerArg)
		if !set {
			return 1, nil
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(arg), 64)
		if err != nil || v < 0 || v > 1 {
			return 0, fmt.Errorf("%s=%q: want a ratio from 0 to 1", envSamplerArg, arg)
		}
		return v, nil
	}
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		r, err := ratio()
		return sdktrace.TraceIDRatioBased(r), err
	case "parentbased_traceidratio":
		r, err := ratio()
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), err
	}
	return nil, fmt.Errorf("%s=%q: not a sampler Cairn knows (always_on, always_off, traceidratio, "+
		"parentbased_always_on, parentbased_always_off, parentbased_traceidratio)", envSampler, name)
}

// linkedSampler samples a root span linked to a sampled span, and leaves every other decision to base.
type linkedSampler struct{ base sdktrace.Sampler }

func (s linkedSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		if p.ParentContext != nil && p.ParentContext.Value(sampledRootKey{}) != nil {
			return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample} // the rootGate drew it
		}
		for _, l := range p.Links {
			if l.SpanContext.IsSampled() {
				return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
			}
		}
	}
	return s.base.ShouldSample(p)
}

func (s linkedSampler) Description() string { return "LinkedOr{" + s.base.Description() + "}" }

// sampledRootKey marks the context of a client RPC that the rootGate drew for sampling: the sampler samples its
// root span instead of drawing again.
type sampledRootKey struct{}

// rootGate decides, before any span is made, whether a client's RPC that arrives without trace context starts a
// sampled trace, with the root ratio of a parent-based ratio sampler. An RPC it does not draw skips otelgrpc
// altogether (no span, no metadata copy), so at 1% the other 99% cost what they cost untraced; one it draws is
// marked (sampledRootKey) so that the sampler samples it. nil when every root is sampled or the sampler is not
// a ratio.
type rootGate struct{ ratio float64 }

// newRootGate is the gate of the sampler NewSampler(sampleRatio) builds, nil when there is nothing to gate.
func newRootGate(sampleRatio float64) *rootGate {
	ratio := sampleRatio
	if sampleRatio < 0 {
		name, set := os.LookupEnv(envSampler)
		if !set || strings.ToLower(strings.TrimSpace(name)) != "parentbased_traceidratio" {
			return nil
		}
		arg, set := os.LookupEnv(envSamplerArg)
		v, err := strconv.ParseFloat(strings.TrimSpace(arg), 64)
		if !set || err != nil || v < 0 || v > 1 {
			return nil
		}
		ratio = v
	}
	if ratio >= 1 {
		return nil
	}
	return &rootGate{ratio: ratio}
}

// draw reports whether a new root is sampled.
func (g *rootGate) draw() bool { return rand.Float64() < g.ratio }
