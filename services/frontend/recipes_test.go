package frontend_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cairn-kv/cairn/api/v3electionpb"
	"github.com/cairn-kv/cairn/api/v3lockpb"
	"github.com/cairn-kv/cairn/internal/testing/clustertest"
)

// dialRaw is a plain gRPC connection to a frontend's client URL (for services client/v3 has no client of).
func dialRaw(t *testing.T, url string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(url, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestLockElectionAndHealth: etcd's Lock and Election services over gRPC (a second Lock waits until the first
// is unlocked; campaign, proclaim, leader, observe, resign) and over the JSON gateway, and grpc.health.v1
// SERVING with a leader.
func TestLockElectionAndHealth(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1, Leasekeepers: 1, Watchhubs: 1})
	c.ActiveLeasekeeper(10 * time.Second)
	conn := dialRaw(t, c.Endpoints()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check = %v, %v; want SERVING", hc, err)
	}

	cli := c.Client(t)
	lease1, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	lease2, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	locks := v3lockpb.NewLockClient(conn)
	first, err := locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("mylock"), Lease: int64(lease1.ID)})
	if err != nil {
		t.Fatalf("first Lock: %v", err)
	}
	if !strings.HasPrefix(string(first.Key), "mylock/") || first.Header.Revision == 0 {
		t.Fatalf("first Lock = %v; want a key under mylock/ and a header", first)
	}
	second := make(chan *v3lockpb.LockResponse, 1)
	go func() {
		resp, err := locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("mylock"), Lease: int64(lease2.ID)})
		if err != nil {
			t.Errorf("second Lock: %v", err)
		}
		second <- resp
	}()
	select {
	case resp := <-second:
		t.Fatalf("second Lock acquired %q while the first holds the lock", resp.GetKey())
	case <-time.After(300 * time.Millisecond): // the second must still be waiting: no condition to poll
	}
	if _, err := locks.Unlock(ctx, &v3lockpb.UnlockRequest{Key: first.Key}); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if resp := <-second; resp == nil || string(resp.Key) == string(first.Key) {
		t.Fatalf("second Lock = %v after unlock", resp)
	}

	elections := v3electionpb.NewElectionClient(conn)
	campaign, err := elections.Campaign(ctx, &v3electionpb.CampaignRequest{Name: []byte("el"), Lease: int64(lease1.ID),
		Value: []byte("v1")})
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	observe, err := elections.Observe(ctx, &v3electionpb.LeaderRequest{Name: []byte("el")})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := observe.Recv(); err != nil || string(got.Kv.Value) != "v1" {
		t.Fatalf("Observe first = %v, %v; want v1", got, err)
	}
	if _, err := elections.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: campaign.Leader, Value: []byte("v2")}); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	if got, err := observe.Recv(); err != nil || string(got.Kv.Value) != "v2" {
		t.Fatalf("Observe after Proclaim = %v, %v; want v2", got, err)
	}
	leader, err := elections.Leader(ctx, &v3electionpb.LeaderRequest{Name: []byte("el")})
	if err != nil || string(leader.Kv.Value) != "v2" {
		t.Fatalf("Leader = %v, %v; want v2", leader, err)
	}
	if _, err := elections.Proclaim(ctx, &v3electionpb.ProclaimRequest{}); err == nil ||
		!strings.Contains(err.Error(), `"leader" field must be provided`) {
		t.Fatalf("Proclaim without leader = %v; want etcd's missing leader error", err)
	}
	if _, err := elections.Resign(ctx, &v3electionpb.ResignRequest{Leader: campaign.Leader}); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if _, err := elections.Leader(ctx, &v3electionpb.LeaderRequest{Name: []byte("el")}); err == nil ||
		!strings.Contains(err.Error(), "election: no leader") {
		t.Fatalf("Leader after Resign = %v; want election: no leader", err)
	}

	// The gateway routes, as etcd's: /v3/lock/lock and /v3/election/leader.
	body := `{"name":"` + base64.StdEncoding.EncodeToString([]byte("gwlock")) + `"}`
	resp, err := http.Post(c.Endpoints()[0]+"/v3/lock/lock", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var locked struct{ Key string }
	if err := json.Unmarshal(raw, &locked); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v3/lock/lock = %d %s", resp.StatusCode, raw)
	}
	if key, _ := base64.StdEncoding.DecodeString(locked.Key); !strings.HasPrefix(string(key), "gwlock/") {
		t.Fatalf("gateway lock key = %q; want gwlock/...", key)
	}
	resp, err = http.Post(c.Endpoints()[0]+"/v3/election/leader", "application/json",
		strings.NewReader(`{"name":"`+base64.StdEncoding.EncodeToString([]byte("el"))+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusOK || !strings.Contains(string(raw), "election: no leader") {
		t.Fatalf("POST /v3/election/leader = %d %s; want election: no leader", resp.StatusCode, raw)
	}
}
