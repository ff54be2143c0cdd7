package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthCommand(t *testing.T) {
	answering := func(status int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/health" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	closedPort := func() string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		lis.Close()
		return "http://" + addr + "/health"
	}
	tests := []struct {
		name    string
		url     string
		wantErr string // "" means healthy
	}{
		{"healthy", answering(200, `{"health":"true","reason":""}`) + "/health", ""},
		{"healthy, path added", answering(200, `{"health":"true","reason":""}`), ""},
		{"unhealthy with a reason", answering(503, `{"health":"false","reason":"no leader"}`) + "/health", `reason "no leader"`},
		{"200 but false", answering(200, `{"health":"false","reason":"alarm NOSPACE"}`) + "/health", "alarm NOSPACE"},
		{"not etcd's JSON", answering(200, `ok`) + "/health", "not etcd's health JSON"},
		{"nothing listening", closedPort(), "no answer"},
		{"cert without key", "https://127.0.0.1:1/health --cert c.pem", "--cert and --key go together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"health", "--timeout", "5s", "--url"}, strings.Fields(tt.url)...)
			root := newRootCommand()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(args)
			err := root.Execute()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("cairn %s: %v", strings.Join(args, " "), err)
			case tt.wantErr == "" && !strings.Contains(out.String(), "is healthy"):
				t.Fatalf("printed %q, want it to say healthy", out.String())
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("cairn %s: error %v, want one containing %q", strings.Join(args, " "), err, tt.wantErr)
			}
		})
	}
}
