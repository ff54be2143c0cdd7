package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/commitlog"
)

func TestReadYourWrites(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				key := fmt.Sprintf("w%d/k%d", w, i)
				put, err := m.client.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte("v")})
				if err != nil {
					errs <- err
					return
				}
				got, err := m.client.Range(ctx, &pb.RangeRequest{Key: []byte(key)})
				if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != put.Header.Revision {
					errs <- fmt.Errorf("read after put of %s at %d: %v %v", key, put.Header.Revision, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all, err := m.client.Range(ctx, &pb.RangeRequest{Key: []byte("w"), RangeEnd: []byte("x"), CountOnly: true})
	if err != nil || all.Count != 400 || all.Header.Revision != 401 {
		t.Fatalf("count %v %v, want 400 keys at revision 401", all, err)
	}
}

func TestSubmitErrorsPassThroughUnchanged(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	ctx := ctxT(t)
	if _, err := m.client.Put(ctx, &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 1600*1024)
	tests := []struct {
		name string
		req  *pb.InternalRaftRequest
		want error
	}{
		{"empty key", &pb.InternalRaftRequest{Put: &pb.PutRequest{}}, rpctypes.ErrGRPCEmptyKey},
		{"value with ignore_value", &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("x"), IgnoreValue: true}}, rpctypes.ErrGRPCValueProvided},
		{"lease not found", &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a"), Lease: 42}}, rpctypes.ErrGRPCLeaseNotFound},
		{"ignore_value on missing key", &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("zz"), IgnoreValue: true}}, rpctypes.ErrGRPCKeyNotFound},
		{"too large", &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte(big)}}, rpctypes.ErrGRPCRequestTooLarge},
		{"duplicate key in txn", &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b")}}},
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b")}}}}}}, rpctypes.ErrGRPCDuplicateKey},
		{"too many ops", &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Compare: make([]*pb.Compare, 129)}}, rpctypes.ErrGRPCTooManyOps},
		{"compacted", &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: 0}}, rpctypes.ErrGRPCCompacted},
		{"future compaction", &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: 99}}, rpctypes.ErrGRPCFutureRev},
		{"revoke unknown lease", &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: 5}}, rpctypes.ErrGRPCLeaseNotFound},
		{"empty request", &pb.InternalRaftRequest{}, rpctypes.ErrGRPCNotCapable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.client.Submit(ctx, tc.req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			st, _ := m.client.Status(ctx)
			if st.Revision != 2 {
				t.Fatalf("revision %d after a refused request, want 2", st.Revision)
			}
		})
	}
	for _, r := range []*pb.RangeRequest{{}, {Key: []byte("a"), SortOrder: 9}, {Key: []byte("a"), Revision: 50}} {
		if _, err := m.client.Range(ctx, r); err == nil {
			t.Errorf("Range(%v) succeeded", r)
		}
	}
}

func TestLogErrorsAndTimeouts(t *testing.T) {
	log := newMemlog(t, 1)
	cfg := testConfig(t, 1)
	cfg.RequestTimeout = 200 * time.Millisecond
	m := startMember(t, cfg, log, nil)
	ctx := ctxT(t)
	log.SetProposeError(rpctypes.ErrGRPCNoLeader)
	if _, err := m.client.Put(ctx, &pb.PutRequest{Key: []byte("a")}); !errors.Is(err, rpctypes.ErrGRPCNoLeader) {
		t.Fatalf("put with no leader: %v, want ErrGRPCNoLeader", err)
	}
	if _, err := m.client.Range(ctx, &pb.RangeRequest{Key: []byte("a")}); !errors.Is(err, rpctypes.ErrGRPCNoLeader) {
		t.Fatalf("linearizable range with no leader: %v, want ErrGRPCNoLeader", err)
	}
	if _, err := m.client.Range(ctx, &pb.RangeRequest{Key: []byte("a"), Serializable: true}); err != nil {
		t.Fatalf("serializable range with no leader: %v", err)
	}
	log.SetProposeError(nil)
	cfg2 := testConfig(t, 2)
	cfg2.RequestTimeout = 200 * time.Millisecond
	black := startMember(t, cfg2, blackholeLog{newMemlog(t, 2)}, nil)
	if _, err := black.client.Put(ctx, &pb.PutRequest{Key: []byte("a")}); !errors.Is(err, rpctypes.ErrGRPCTimeout) {
		t.Fatalf("put never committed: %v, want ErrGRPCTimeout", err)
	}
}

// blackholeLog accepts proposals and never commits them.
type blackholeLog struct{ commitlog.Log }

func (blackholeLog) Propose(context.Context, []byte) error { return nil }

func TestHistoryOverGRPC(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	ctx := ctxT(t)
	for i := range 25 {
		if _, err := m.client.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%02d", i%5)), Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var events, pages int
	compactRev, err := m.client.History(ctx, &storagepb.HistoryRequest{Key: []byte("k"), RangeEnd: []byte("l"), StartRevision: 2,
		PrevKv: true, PageSize: 10}, func(p *storagepb.HistoryResponse) error { pages++; events += len(p.Events); return nil })
	if err != nil || events != 25 || pages != 3 || compactRev != 0 {
		t.Fatalf("history: %d events in %d pages, compact %d, err %v; want 25 in 3", events, pages, compactRev, err)
	}
	if _, err := m.client.Compact(ctx, &pb.CompactionRequest{Revision: 10, Physical: true}); err != nil {
		t.Fatal(err)
	}
	compactRev, err = m.client.History(ctx, &storagepb.HistoryRequest{Key: []byte("k"), StartRevision: 5},
		func(*storagepb.HistoryResponse) error { return nil })
	if !errors.Is(err, rpctypes.ErrGRPCCompacted) || compactRev != 10 {
		t.Fatalf("history below compaction: %v, compact revision %d; want ErrGRPCCompacted at 10", err, compactRev)
	}
}

func TestLeasesOverGRPC(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	ctx := ctxT(t)
	g, err := m.client.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 30})
	if err != nil || g.ID <= 0 || g.TTL != 30 {
		t.Fatalf("grant: %v %v", g, err)
	}
	for _, k := range []string{"b", "a"} {
		if _, err := m.client.Put(ctx, &pb.PutRequest{Key: []byte(k), Lease: g.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.client.LeaseCheckpoint(ctx, &pb.LeaseCheckpointRequest{Checkpoints: []*pb.LeaseCheckpoint{{ID: g.ID, Remaining_TTL: 11}}}); err != nil {
		t.Fatal(err)
	}
	ttl, err := m.client.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: g.ID, Keys: true})
	if err != nil || ttl.TTL != 11 || ttl.GrantedTTL != 30 || len(ttl.Keys) != 2 || string(ttl.Keys[0]) != "a" {
		t.Fatalf("ttl: %v %v", ttl, err)
	}
	list, _ := m.client.LeaseLeases(ctx)
	if len(list.Leases) != 1 {
		t.Fatalf("leases %v", list)
	}
	rv, err := m.client.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: g.ID})
	if err != nil || rv.Header.Revision != 4 {
		t.Fatalf("revoke: %v %v (want both keys deleted at revision 4)", rv, err)
	}
	recs, _ := m.sink.Records()
	last := recs[len(recs)-1]
	if len(last.Events) != 2 || last.Revision != 4 || len(last.Leases) != 1 || last.Leases[0].Type != 2 {
		t.Fatalf("sink record of revoke: %+v", last)
	}
}

func TestAppliedSinkOrder(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	ctx := ctxT(t)
	steps := []*pb.InternalRaftRequest{
		{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}},
		{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("zz")}}, // no change: no record
		{Put: &pb.PutRequest{Key: []byte("a"), Value: []byte("2")}},
		{Compaction: &pb.CompactionRequest{Revision: 2}},
		{LeaseGrant: &pb.LeaseGrantRequest{ID: 7, TTL: 10}},
	}
	for _, r := range steps {
		if _, err := m.client.Submit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	recs, _ := m.sink.Records()
	got := make([]string, len(recs))
	for i, r := range recs {
		got[i] = fmt.Sprintf("rev%d events%d leases%d compact%d", r.Revision, len(r.Events), len(r.Leases), r.CompactRevision)
	}
	want := []string{"rev2 events1 leases0 compact0", "rev3 events1 leases0 compact0", "rev3 events0 leases0 compact2",
		"rev3 events0 leases1 compact0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	if recs[1].Events[0].PrevKv == nil || string(recs[1].Events[0].PrevKv.Value) != "1" {
		t.Fatalf("second put has no prev kv: %v", recs[1].Events[0])
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Index <= recs[i-1].Index {
			t.Fatalf("records out of index order: %v", recs)
		}
	}
}

func TestQuotaRaisesNoSpaceAlarm(t *testing.T) {
	cfg := testConfig(t, 3)
	cfg.QuotaBackendBytes = 1 << 20
	m := startMember(t, cfg, newMemlog(t, 3), nil)
	ctx := ctxT(t)
	value := strings.Repeat("v", 64*1024)
	var err error
	for i := 0; i < 200 && err == nil; i++ {
		_, err = m.client.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprint(i)), Value: []byte(value)})
	}
	if !errors.Is(err, rpctypes.ErrGRPCNoSpace) {
		t.Fatalf("puts past the quota: %v, want ErrGRPCNoSpace", err)
	}
	alarms, err := m.client.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
	if err != nil || len(alarms.Alarms) != 1 || alarms.Alarms[0].Alarm != pb.AlarmType_NOSPACE || alarms.Alarms[0].MemberID != 3 {
		t.Fatalf("alarms %v %v, want NOSPACE on member 3", alarms, err)
	}
	if _, err := m.client.Put(ctx, &pb.PutRequest{Key: []byte("small")}); !errors.Is(err, rpctypes.ErrGRPCNoSpace) {
		t.Fatalf("put with the alarm raised: %v", err)
	}
	if _, err := m.client.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("0")}); err != nil {
		t.Fatalf("delete with the alarm raised: %v", err)
	}
	code, body := httpGet(t, "http://"+m.AdminAddr()+"/health")
	if code != 503 || !strings.Contains(body, "NOSPACE") {
		t.Fatalf("/health = %d %s, want 503 naming NOSPACE", code, body)
	}
	if _, err := m.client.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: 3, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if st, _ := m.client.Status(ctx); len(st.Alarms) != 0 {
		t.Fatalf("alarms after disarm: %v", st.Alarms)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAdminEndpoint(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	if _, err := m.client.Put(ctxT(t), &pb.PutRequest{Key: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{"/health", `{"health":"true","reason":""}`},
		{"/metrics", "cairn_storage_revision 2"},
		{"/metrics", `cairn_storage_submit_duration_seconds_count{code="OK",type="put"} 1`},
	}
	for _, tc := range tests {
		if code, body := httpGet(t, "http://"+m.AdminAddr()+tc.path); code != 200 || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d, want 200 containing %q:\n%.2000s", tc.path, code, tc.want, body)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults with a data dir", Config{DataDir: "/tmp/x"}, true},
		{"no data dir", Config{}, false},
		{"bad listen URL", Config{DataDir: "/tmp/x", ListenURL: "ftp://a:1"}, false},
		{"negative timeout", Config{DataDir: "/tmp/x", RequestTimeout: -1}, false},
		{"negative limit", Config{DataDir: "/tmp/x", MaxTxnOps: -1}, false},
	}
	for _, tc := range tests {
		if err := tc.cfg.WithDefaults().Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if d := (Config{}).WithDefaults(); d.QuotaBackendBytes != 2<<30 || d.MaxTxnOps != 128 || d.MaxRequestBytes != 1536*1024 {
		t.Errorf("defaults %+v", d)
	}
}
