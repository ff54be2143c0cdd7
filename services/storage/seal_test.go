package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/commitlog/commitlogtest"
	"github.com/cairn-kv/cairn/internal/seal"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
	"github.com/cairn-kv/cairn/services/storage/mvcc/mvcctest"
)

func testKeyring(t testing.TB, providers string) *seal.Keyring {
	t.Helper()
	cfg, err := seal.ParseConfig([]byte("kind: EncryptionConfiguration\nresources:\n- prefixes: [\"/\"]\n  providers:\n" + providers))
	if err != nil {
		t.Fatal(err)
	}
	k, err := seal.NewKeyring(context.Background(), cfg, seal.Options{Logger: slog.New(slog.DiscardHandler)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

func randomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// TestSealedValues writes secrets through every write path of a storage with encryption on, reads them back
// plain through every read path, and finds no plaintext in the log file, the bbolt file or the applied records.
func TestSealedValues(t *testing.T) {
	key1 := randomSecret()
	ring := testKeyring(t, fmt.Sprintf("  - aesgcm: {keys: [{name: key1, secret: %s}]}\n  - identity: {}\n", key1))
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log")
	memlog, err := commitlogtest.Open(commitlogtest.Config{MemberID: 1, Path: logPath})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, 1)
	cfg.DataDir = filepath.Join(dir, "storage")
	sink := NewMemorySink()
	st, err := New(cfg, Deps{Log: memlog, Sink: sink, Keyring: ring, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	secret := func(i int) []byte { return []byte(fmt.Sprintf("TOPSECRET-%d-plaintext", i)) }
	submit := func(req *pb.InternalRaftRequest) *storagepb.SubmitResponse {
		t.Helper()
		resp, err := st.Submit(ctx, req)
		if err != nil {
			t.Fatalf("submit %v: %v", req, err)
		}
		return resp
	}
	submit(&pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/s/a"), Value: secret(1)}})
	put := submit(&pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/s/a"), Value: secret(2), PrevKv: true}})
	if got := put.GetPut().PrevKv.GetValue(); !bytes.Equal(got, secret(1)) {
		t.Fatalf("put prev_kv = %q", got)
	}
	// Value compares compare plain values; the compare's own value is sealed in the log too.
	txn := submit(&pb.InternalRaftRequest{Txn: &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("/s/a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL,
			TargetUnion: &pb.Compare_Value{Value: secret(2)}}},
		Success: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("/s/b"), Value: secret(3)}}},
			{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("/s/a"), Value: secret(4), PrevKv: true}}},
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0"),
				SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_DESCEND}}},
		}}}).GetTxn()
	if !txn.Succeeded {
		t.Fatal("a VALUE compare equal to the stored plain value failed")
	}
	if got := txn.Responses[1].GetResponsePut().PrevKv.GetValue(); !bytes.Equal(got, secret(2)) {
		t.Fatalf("txn put prev_kv = %q", got)
	}
	if kvs := txn.Responses[2].GetResponseRange().Kvs; len(kvs) != 2 || !bytes.Equal(kvs[0].Value, secret(4)) || !bytes.Equal(kvs[1].Value, secret(3)) {
		t.Fatalf("txn range sorted by value descending = %v", kvs)
	}
	notEqual, err := st.Submit(ctx, &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("/s/a"),
		Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: secret(2)}}}}})
	if err != nil || notEqual.GetTxn().Succeeded {
		t.Fatalf("read-only txn comparing an old value: %v %v", notEqual, err)
	}
	del := submit(&pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("/s/b"), PrevKv: true}})
	if kvs := del.GetDeleteRange().PrevKvs; len(kvs) != 1 || !bytes.Equal(kvs[0].Value, secret(3)) {
		t.Fatalf("delete prev_kvs = %v", kvs)
	}
	submit(&pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/s/c"), Value: secret(5)}})

	rangeResp, err := st.Range(ctx, &pb.RangeRequest{Key: []byte("/s/a")})
	if err != nil || len(rangeResp.Kvs) != 1 || !bytes.Equal(rangeResp.Kvs[0].Value, secret(4)) {
		t.Fatalf("Range = %v, %v", rangeResp, err)
	}
	encoded, err := st.RangeEncoded(ctx, &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0")}, nil)
	decoded := &pb.RangeResponse{}
	if err != nil || proto.Unmarshal(encoded, decoded) != nil || len(decoded.Kvs) != 2 ||
		!bytes.Equal(decoded.Kvs[0].Value, secret(4)) || !bytes.Equal(decoded.Kvs[1].Value, secret(5)) {
		t.Fatalf("RangeEncoded = %v, %v", decoded, err)
	}
	var history []*mvccpb.Event
	if err := st.History(ctx, &storagepb.HistoryRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0"), StartRevision: 1, PrevKv: true},
		func(r *storagepb.HistoryResponse) error { history = append(history, r.Events...); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(history) != 6 || !bytes.Equal(history[1].Kv.Value, secret(2)) || !bytes.Equal(history[1].PrevKv.Value, secret(1)) ||
		!bytes.Equal(history[4].PrevKv.Value, secret(3)) {
		t.Fatalf("History = %v", history)
	}
	records, _ := sink.Records()
	for _, rec := range records {
		for _, ev := range rec.Events {
			for _, kv := range []*mvccpb.KeyValue{ev.Kv, ev.PrevKv} {
				if kv != nil && len(kv.Value) > 0 && !seal.IsSealed(kv.Value) {
					t.Fatalf("applied record of index %d holds a plain value %q", rec.Index, kv.Value)
				}
			}
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	_ = memlog.Close()
	assertNoPlaintext(t, dir, []byte("TOPSECRET"))

	// The same data dir with a keyring that cannot open the values: New refuses, naming the reason, and changes
	// nothing on disk.
	dbPath := filepath.Join(cfg.DataDir, dbFileName)
	before, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, providers, wantErr string
	}{
		{"key removed", fmt.Sprintf("  - aesgcm: {keys: [{name: key2, secret: %s}]}\n", randomSecret()), "not configured"},
		{"wrong secret", fmt.Sprintf("  - aesgcm: {keys: [{name: key1, secret: %s}]}\n", randomSecret()), "failed authentication"},
		{"identity only", "  - identity: {}\n", "not configured"},
		{"no configuration", "", "no encryption configuration was given"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			memlog, err := commitlogtest.Open(commitlogtest.Config{MemberID: 1, Path: logPath})
			if err != nil {
				t.Fatal(err)
			}
			defer memlog.Close()
			var keyring *seal.Keyring
			if tt.providers != "" {
				keyring = testKeyring(t, tt.providers)
			}
			_, err = New(cfg, Deps{Log: memlog, Keyring: keyring, Logger: slog.New(slog.DiscardHandler)})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "encryption configuration") {
				t.Fatalf("New = %v, want a refusal saying %q", err, tt.wantErr)
			}
			after, _ := os.ReadFile(dbPath)
			if !bytes.Equal(before, after) {
				t.Fatal("a refused start changed storage.db")
			}
		})
	}
}

// assertNoPlaintext fails when any file under dir holds plaintext.
func assertNoPlaintext(t *testing.T, dir string, plaintext []byte) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if i := bytes.Index(data, plaintext); i >= 0 {
			t.Errorf("%s holds the plaintext at offset %d", path, i)
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("scanned %d files under %s: %v", files, dir, err)
	}
}

func TestSealErrorCodes(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("x: %w", seal.ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("x: %w", seal.ErrAuthFailed), codes.DataLoss},
		{fmt.Errorf("x: %w", seal.ErrUnknownKey), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", seal.ErrNotSealed), codes.FailedPrecondition},
	} {
		if got := status.Code(sealError(tt.err)); got != tt.want {
			t.Errorf("sealError(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestTamperedValue flips a byte of one sealed value in storage.db while storage is stopped: the restart's sample
// (the newest values) does not see it, and a read of it fails with DataLoss, counted as an auth failure, instead of
// returning garbage; its neighbours still read.
func TestTamperedValue(t *testing.T) {
	ring := testKeyring(t, fmt.Sprintf("  - aesgcm: {keys: [{name: key1, secret: %s}]}\n", randomSecret()))
	cfg := testConfig(t, 1)
	memlog := newMemlog(t, 1)
	m := startMemberWith(t, cfg, Deps{Log: memlog, Keyring: ring})
	ctx := ctxT(t)
	for i := range sampleValues + 10 {
		if _, err := m.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: fmt.Appendf(nil, "/t/%03d", i), Value: []byte("value")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(cfg.DataDir, dbFileName)
	var victim *mvccpb.KeyValue
	if err := mvcc.ScanValues(dbPath, false, func(kv *mvccpb.KeyValue) error {
		victim = kv
		return mvcc.ErrStopScan
	}); err != nil {
		t.Fatal(err)
	}
	if victim == nil || string(victim.Key) != "/t/000" {
		t.Fatalf("the oldest stored value is %v, want /t/000's", victim)
	}
	// The flip goes through bbolt, onto the page the tree reads: bbolt copies a page on write and does not wipe
	// the freed copy, so the same sealed bytes can sit in the file more than once, a dead copy among them.
	tampered := bytes.Clone(victim.Value)
	tampered[len(tampered)-1] ^= 0x01
	if _, err := mvcctest.TamperValue(dbPath, victim.Key, tampered); err != nil {
		t.Fatal(err)
	}

	again := startMemberWith(t, cfg, Deps{Log: memlog, Keyring: ring})
	_, err := again.Range(ctx, &pb.RangeRequest{Key: []byte("/t/000")})
	if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), "failed authentication") {
		t.Fatalf("Range of the tampered value: %v, want DataLoss", err)
	}
	if _, err := again.Range(ctx, &pb.RangeRequest{Key: []byte("/t/"), RangeEnd: []byte("/t0")}); status.Code(err) != codes.DataLoss {
		t.Fatalf("a range over the tampered value: %v, want DataLoss", err)
	}
	if resp, err := again.Range(ctx, &pb.RangeRequest{Key: []byte("/t/001")}); err != nil || string(resp.Kvs[0].Value) != "value" {
		t.Fatalf("Range of an intact neighbour: %v %v", resp, err)
	}
	if n := testutil.ToFloat64(again.metrics.sealFailures.WithLabelValues("auth_failed")); n < 1 {
		t.Fatalf("auth failures counted: %v", n)
	}

	// The failures raise this member's CORRUPT alarm through the log, once however many reads failed, and the
	// cluster then refuses writes as etcd does.
	corrupt := []*pb.AlarmMember{{MemberID: 1, Alarm: pb.AlarmType_CORRUPT}}
	waittest.Until(t, 10*time.Second, 10*time.Millisecond, "the CORRUPT alarm", func() bool {
		return proto.Equal(&pb.AlarmResponse{Alarms: again.currentStore().Alarms(pb.AlarmType_NONE)}, &pb.AlarmResponse{Alarms: corrupt})
	})
	for range 5 {
		if _, err := again.Range(ctx, &pb.RangeRequest{Key: []byte("/t/000")}); status.Code(err) != codes.DataLoss {
			t.Fatalf("Range of the tampered value after the alarm: %v", err)
		}
	}
	if _, err := again.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/t/new"), Value: []byte("v")}}); err != rpctypes.ErrGRPCCorrupt {
		t.Fatalf("Put with the CORRUPT alarm: %v, want %v", err, rpctypes.ErrGRPCCorrupt)
	}
	records, _ := again.sink.Records()
	raised := 0
	for _, rec := range records {
		if rec.Alarms != nil {
			raised++
		}
	}
	if raised != 1 {
		t.Fatalf("%d alarm changes applied, want the one CORRUPT alarm", raised)
	}
}
