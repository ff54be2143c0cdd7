package localstack

import (
	"fmt"
	"slices"
)

// traceService runs `cairn trace` when the stack has Config.Trace: an OTLP receiver every other child exports
// its spans to (see traceEnv), serving the page of where the time went on its "http" port. It is listed first,
// so it is up before the services that export to it.
func traceService() service {
	return service{
		name: "trace", single: true, ownMemory: true, count: (*plan).traces, ports: []string{"grpc", "http", "metrics"},
		args: func(p *plan, _ int) []string {
			args := []string{"--listen-otlp-grpc", p.url("trace", "grpc"), "--listen-otlp-http", p.url("trace", "http")}
			if p.cfg.TraceForward != "" {
				args = append(args, "--forward-otlp", p.cfg.TraceForward)
			}
			return args
		},
	}
}

func (p *plan) traces() int {
	if !p.cfg.Trace {
		return 0
	}
	return 1
}

// traceEnv is the environment that makes a child export its spans to the stack's `cairn trace` (none without
// Config.Trace, and none for the receiver itself). It comes after Config.Env, so it wins over an
// OTEL_EXPORTER_OTLP_ENDPOINT of this process's environment or of Config.Env.
func (p *plan) traceEnv(svc service) []string {
	if p.traces() == 0 || svc.name == "trace" {
		return nil
	}
	return append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + p.url("trace", "grpc"), "OTEL_EXPORTER_OTLP_INSECURE=true"}, TraceQueueEnv...)
}

// traceDeps makes every other child depend on the stack's `cairn trace`: it is up before they export to it,
// and stopped after they have flushed their last spans to it (without it, each child's exporter waited out
// its shutdown timeout on a receiver already gone, and the supervisor killed it).
func (p *plan) traceDeps(svc service) []string {
	if p.traces() == 0 || svc.name == "trace" {
		return nil
	}
	return []string{"trace"}
}

// TraceQueueEnv raises the span exporters' queue (the SDK's default, 2048 spans, overflows and drops spans
// within a second of a 1000-client benchmark) for a stack whose every span is meant to be analysed.
var TraceQueueEnv = []string{"OTEL_BSP_MAX_QUEUE_SIZE=65536"}

// TraceURL is the page of the stack's `cairn trace` (empty without Config.Trace); valid after Plan or Start.
func (s *Stack) TraceURL() string {
	if s.plan == nil || s.plan.traces() == 0 {
		return ""
	}
	return fmt.Sprintf("%s/", s.plan.url("trace", "http"))
}

// withTrace is services with the trace receiver first.
func withTrace(kinds []service) []service { return slices.Insert(kinds, 0, traceService()) }
