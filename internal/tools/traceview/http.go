package traceview

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// maxRequestBytes bounds one OTLP/HTTP request body (after decompression).
const maxRequestBytes = 64 << 20

// Handler serves POST /v1/traces (OTLP/HTTP), the page at /, the text report at /report.txt and /health.
func (r *Receiver) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.handleExport)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := r.Report().WriteHTML(w, r.PageInfo()); err != nil {
			r.log.Warn("writing trace page", "err", err)
		}
	})
	mux.HandleFunc("GET /report.txt", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_ = r.Report().WriteText(w)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"health":"true","reason":""}`)
	})
	return mux
}

// PageInfo describes the store for a page written now.
func (r *Receiver) PageInfo() PageInfo {
	return PageInfo{Store: r.store.Stats(), Generated: time.Now(), Refresh: r.cfg.PageRefresh}
}

// handleExport is OTLP/HTTP's trace export: a protobuf or JSON ExportTraceServiceRequest, answered in the
// same encoding; a bad body is a 400, as the specification says (the exporter must not retry it).
func (r *Receiver) handleExport(w http.ResponseWriter, req *http.Request) {
	mediaType, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	body, err := readBody(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	export := &collectorpb.ExportTraceServiceRequest{}
	switch mediaType {
	case "application/x-protobuf":
		err = proto.Unmarshal(body, export)
	case "application/json":
		err = unmarshalJSON(body, export)
	default:
		http.Error(w, fmt.Sprintf("unsupported content type %q: OTLP/HTTP is application/x-protobuf or application/json", mediaType),
			http.StatusUnsupportedMediaType)
		return
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("decoding %s trace export: %v", mediaType, err), http.StatusBadRequest)
		return
	}
	r.receive(export)
	var answer []byte
	if mediaType == "application/json" {
		answer, _ = protojson.Marshal(&collectorpb.ExportTraceServiceResponse{})
	} else {
		answer, _ = proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	}
	w.Header().Set("Content-Type", mediaType)
	_, _ = w.Write(answer)
}

func readBody(req *http.Request) ([]byte, error) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		defer gz.Close()
		body = gz
	}
	data, err := io.ReadAll(io.LimitReader(body, maxRequestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading body: %w", err)
	}
	if len(data) > maxRequestBytes {
		return nil, fmt.Errorf("body over %d bytes", maxRequestBytes)
	}
	return data, nil
}

// unmarshalJSON decodes OTLP/JSON. It is protobuf's JSON mapping except that trace and span ids are hex, not
// base64 (OTLP specification, "JSON Protobuf Encoding"), so the ids are rewritten before protojson reads them.
func unmarshalJSON(body []byte, export *collectorpb.ExportTraceServiceRequest) error {
	var doc any
	decoder := json.NewDecoder(bytes.NewReader(body))
	decoder.UseNumber()
	if err := decoder.Decode(&doc); err != nil {
		return err
	}
	if err := hexIDsToBase64(doc); err != nil {
		return err
	}
	rewritten, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(rewritten, export)
}

// idFields are the OTLP/JSON fields holding hex ids.
var idFields = map[string]bool{"traceId": true, "spanId": true, "parentSpanId": true, "trace_id": true, "span_id": true, "parent_span_id": true}

func hexIDsToBase64(doc any) error {
	switch v := doc.(type) {
	case map[string]any:
		for key, value := range v {
			if text, ok := value.(string); ok && idFields[key] {
				raw, err := hex.DecodeString(text)
				if err != nil {
					return fmt.Errorf("%s %q is not hex: %w", key, text, err)
				}
				v[key] = base64.StdEncoding.EncodeToString(raw)
				continue
			}
			if err := hexIDsToBase64(value); err != nil {
				return err
			}
		}
	case []any:
		for _, item := range v {
			if err := hexIDsToBase64(item); err != nil {
				return err
			}
		}
	}
	return nil
}
