package frontend_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/frontend"
)

// httpDo sends one request and returns the status code and body.
func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 15 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func TestGatewayJSON(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	base := c.Endpoints()[0]
	code, body := httpDo(t, "POST", base+"/v3/kv/put", `{"key":"Zm9v","value":"YmFy"}`)
	if code != 200 || !strings.Contains(body, `"cluster_id":"`) || !strings.Contains(body, `"raft_term":"`) {
		t.Fatalf("put: %d %s", code, body)
	}
	var put struct {
		Header struct {
			Revision string `json:"revision"`
			MemberID string `json:"member_id"`
		} `json:"header"`
	}
	if err := json.Unmarshal([]byte(body), &put); err != nil || put.Header.Revision == "" || put.Header.MemberID == "" {
		t.Fatalf("put answer %s: %v", body, err)
	}
	for _, tc := range []struct {
		name, path, body string
		wantCode         int
		want             []string
	}{
		// Shapes as etcd 3.7.3's gateway writes them: proto names, 64-bit numbers as strings, no empty fields.
		{"range", "/v3/kv/range", `{"key":"Zm9v"}`, 200,
			[]string{`"kvs":[{"key":"Zm9v","create_revision":"` + put.Header.Revision + `"`, `"value":"YmFy"`, `"count":"1"`}},
		{"range error", "/v3/kv/range", `{"key":""}`, 400, []string{`{"code":3,"message":"etcdserver: key is not provided"}`}},
		{"txn", "/v3/kv/txn", `{"compare":[{"key":"Zm9v","target":"VALUE","value":"YmFy"}],"success":[{"request_put":{"key":"Zm9v","value":"YmF6"}}]}`,
			200, []string{`"succeeded":true`, `"response_put"`}},
		{"delete", "/v3/kv/deleterange", `{"key":"Zm9v"}`, 200, []string{`"deleted":"1"`}},
		{"status", "/v3/maintenance/status", `{}`, 200, []string{`"version":"3.7.3"`, `"dbSize":"`, `"leader":"`}},
		{"member list", "/v3/cluster/member/list", `{}`, 200, []string{`"name":"m1"`, `"peerURLs":["http://127.0.0.1:`}},
		{"auth status", "/v3/auth/status", `{}`, 200, []string{`"authRevision":"1"`}},
		{"lease without keepers", "/v3/lease/grant", `{"TTL":"5"}`, 501, []string{`"code":12`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := httpDo(t, "POST", base+tc.path, tc.body)
			var compact bytes.Buffer // protojson spaces its output at random, by design
			if err := json.Compact(&compact, []byte(body)); err == nil {
				body = compact.String()
			}
			if code != tc.wantCode {
				t.Fatalf("%s: %d %s, want %d", tc.path, code, body, tc.wantCode)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Fatalf("%s: %s lacks %s", tc.path, body, w)
				}
			}
		})
	}
}

func TestHealthEndpoints(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := "http://" + lis.Addr().String()
	lis.Close()
	c := clustertest.Start(t, clustertest.Options{Frontends: 1, ConfigureFrontend: func(cfg *frontend.Config) {
		cfg.ListenMetricsURLs = []string{metricsURL}
	}})
	base := c.Endpoints()[0]
	for _, tc := range []struct {
		url      string
		wantCode int
		want     string
	}{
		{base + "/health", 200, `{"health":"true","reason":""}`},
		{metricsURL + "/health", 200, `{"health":"true","reason":""}`},
		{base + "/readyz", 200, "ok\n"},
		{base + "/readyz?verbose", 200, "[+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\nok\n"},
		{base + "/readyz/linearizable_read", 200, "ok\n"},
		{base + "/livez?verbose", 200, "[+]serializable_read ok\nok\n"},
		{base + "/version", 200, `{"etcdserver":"3.7.3","etcdcluster":"3.7.0"}`}, // etcd adds "storage", Cairn's storage is not etcd's
	} {
		if code, body := httpDo(t, "GET", tc.url, ""); code != tc.wantCode || body != tc.want {
			t.Errorf("GET %s: %d %q, want %d %q", tc.url, code, body, tc.wantCode, tc.want)
		}
	}
	if code, body := httpDo(t, "GET", metricsURL+"/metrics", ""); code != 200 || !strings.Contains(body, "cairn_frontend_request_duration_seconds") {
		t.Errorf("metrics: %d, no frontend series", code)
	}
	if code, _ := httpDo(t, "POST", base+"/health", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /health: %d, want 405 as etcd", code)
	}

	// Without a quorum there is no leader and no linearizable read: unhealthy, as etcd; a serializable
	// health check still passes.
	members := c.Members()
	members[1].StopConsensus()
	members[2].StopConsensus()
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, "/health to report the lost quorum", func() bool {
		code, body := httpDo(t, "GET", base+"/health", "")
		return code == 503 && (strings.Contains(body, `"reason":"RAFT NO LEADER"`) || strings.Contains(body, `"reason":"RANGE ERROR:`))
	})
	if code, body := httpDo(t, "GET", base+"/readyz", ""); code != 503 || !strings.Contains(body, "[-]linearizable_read failed") {
		t.Errorf("readyz without quorum: %d %q", code, body)
	}
	if code, body := httpDo(t, "GET", base+"/health?serializable=true", ""); code != 200 {
		t.Errorf("serializable health without quorum: %d %s", code, body)
	}
	for _, m := range members[1:] {
		if err := m.RestartConsensus(); err != nil {
			t.Fatal(err)
		}
	}
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, "/health healthy after the quorum returned", func() bool {
		code, _ := httpDo(t, "GET", base+"/health", "")
		return code == 200
	})
}
