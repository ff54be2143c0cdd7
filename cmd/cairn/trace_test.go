package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// lockedBuffer is a bytes.Buffer safe to write from the command and read from the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestTraceCommand: `cairn trace` receives a service's spans over OTLP/gRPC, `cairn trace report` prints
// their breakdown from the running receiver, and on SIGINT (its context ending) it prints the report and
// writes the page.
func TestTraceCommand(t *testing.T) {
	grpcAddr, httpAddr := loopbacktest.Addr(t), loopbacktest.Addr(t)
	page := filepath.Join(t.TempDir(), "traces.html")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCommand()
	stdout := &lockedBuffer{}
	root.SetOut(stdout)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"trace", "--listen-otlp-grpc", grpcAddr, "--listen-otlp-http", "http://" + httpAddr, "--html", page,
		"--log-level", "error"})
	exited := make(chan error, 1)
	go func() { exited <- root.ExecuteContext(ctx) }()
	waittest.Until(t, 30*time.Second, 20*time.Millisecond, "cairn trace serving", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})

	exporter, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(grpcAddr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("cairn-frontend"))))
	tracer := tp.Tracer("trace_test")
	for range 3 {
		reqCtx, span := tracer.Start(ctx, "frontend.receive", trace.WithAttributes(attribute.String("cairn.op", "txn")))
		_, child := tracer.Start(reqCtx, "storage.submit")
		child.End()
		span.End()
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	var report string
	waittest.Until(t, 30*time.Second, 50*time.Millisecond, "the three txns in `cairn trace report`", func() bool {
		report, err = runCairn(t, "trace", "report", "--url", httpAddr)
		return err == nil && strings.Contains(report, "txn: 3 traces")
	})
	if !strings.Contains(report, "storage.submit") {
		t.Errorf("report lacks the storage.submit stage:\n%s", report)
	}

	cancel()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("cairn trace: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cairn trace did not stop")
	}
	if out := stdout.String(); !strings.Contains(out, "txn: 3 traces") || !strings.Contains(out, "page written to "+page) {
		t.Errorf("output on exit lacks the report or the page:\n%s", out)
	}
	html, err := os.ReadFile(page)
	if err != nil || !bytes.Contains(html, []byte("storage.submit")) || !bytes.HasSuffix(bytes.TrimSpace(html), []byte("</html>")) {
		t.Fatalf("page %s: %v\n%s", page, err, html)
	}
}
