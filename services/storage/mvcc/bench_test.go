package mvcc

import (
	"fmt"
	"sort"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

var benchValue = make([]byte, 256)

func benchKey(i int) []byte { return []byte(fmt.Sprintf("/registry/pods/ns-%03d/pod-%07d", i%100, i)) }

// loadedStore is a store holding n keys of 256-byte values, committed.
func loadedStore(b *testing.B, n int) *testStore {
	b.Helper()
	ts := openTestStore(b, Config{})
	for i := range n {
		ts.apply(&pb.InternalRaftRequest{Put: &pb.PutRequest{Key: benchKey(i), Value: benchValue}})
	}
	if err := ts.Commit(); err != nil {
		b.Fatal(err)
	}
	return ts
}

// reportLatency reports the p50 and p99 of the measured operations.
func reportLatency(b *testing.B, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkPut applies single-key puts of 256-byte values as log entries, with the default batched commits
// (every 100ms or 10000 entries, each fsynced); puts/s is the apply throughput. "one key" puts the same key
// every time, as etcd's benchmark does with --key-space-size 1, so that key's history grows without bound.
func BenchmarkPut(b *testing.B) {
	for _, keys := range []struct {
		name string
		key  func(i int) []byte
	}{
		{"distinct keys", benchKey},
		{"one key", func(int) []byte { return benchKey(0) }},
	} {
		b.Run(keys.name, func(b *testing.B) {
			ts := openTestStore(b, Config{})
			reqs := make([]*pb.InternalRaftRequest, b.N)
			for i := range reqs {
				reqs[i] = &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: keys.key(i), Value: benchValue}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				ts.apply(reqs[i])
			}
			if err := ts.Commit(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "puts/s")
		})
	}
}

// BenchmarkRangeSingleKey reads one key out of 100k.
func BenchmarkRangeSingleKey(b *testing.B) {
	const keys = 100000
	ts := loadedStore(b, keys)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		resp, err := ts.Range(&pb.RangeRequest{Key: benchKey((i * 7919) % keys)})
		lat = append(lat, time.Since(start))
		if err != nil || len(resp.Kvs) != 1 {
			b.Fatalf("range: %v %v", resp, err)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkRangePrefix1000 reads 1000-key prefixes out of 100k: "decoded" is Range (what a txn or the unary
// RPC gets), "marshal" is Range and then proto.Marshal (the answer on the wire, as storage used to make it) and
// "encoded" is RangeEncoded (stored KeyValues copied into the wire answer, never decoded).
func BenchmarkRangePrefix1000(b *testing.B) {
	ts := loadedStore(b, 100000)
	for _, bc := range []struct {
		name string
		// answer reads r and returns how many KeyValues (decoded) or bytes (encoded) it got.
		answer func(r *pb.RangeRequest) (int, error)
		want   int
	}{
		{"decoded", func(r *pb.RangeRequest) (int, error) {
			resp, err := ts.Range(r)
			return len(resp.GetKvs()), err
		}, 1000},
		{"marshal", func(r *pb.RangeRequest) (int, error) {
			resp, err := ts.Range(r)
			if err != nil {
				return 0, err
			}
			wire, err := proto.Marshal(resp)
			return len(wire), err
		}, 1000 * len(benchValue)},
		{"encoded", func(r *pb.RangeRequest) (int, error) {
			wire, err := ts.RangeEncoded(r, 1, nil)
			return len(wire), err
		}, 1000 * len(benchValue)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				prefix := fmt.Sprintf("/registry/pods/ns-%03d/", i%100)
				start := time.Now()
				got, err := bc.answer(&pb.RangeRequest{Key: []byte(prefix), RangeEnd: []byte(prefix[:len(prefix)-1] + "0")})
				lat = append(lat, time.Since(start))
				if err != nil || got < bc.want {
					b.Fatalf("range: %d, want at least %d, %v", got, bc.want, err)
				}
			}
			b.StopTimer()
			reportLatency(b, lat)
		})
	}
}

// BenchmarkTxn applies compare-and-swap txns (version compare, put on success, range on failure) on 10k keys.
func BenchmarkTxn(b *testing.B) {
	const keys = 10000
	ts := loadedStore(b, keys)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		key := benchKey(i % keys)
		res := ts.apply(&pb.InternalRaftRequest{Txn: &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: key, Target: pb.Compare_VERSION, Result: pb.Compare_GREATER,
				TargetUnion: &pb.Compare_Version{Version: 0}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: benchValue}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key}}}},
		}})
		if res.Err != nil || !res.Response.(*pb.TxnResponse).Succeeded {
			b.Fatalf("txn: %v", res)
		}
	}
}

// BenchmarkHistory reads pages of 1000 events with prev kvs from a 100k-revision history, over every key.
func BenchmarkHistory(b *testing.B) {
	const revs = 100000
	ts := loadedStore(b, revs)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		from := int64(2 + (i*1000)%(revs-1000))
		page, err := ts.History(HistoryQuery{Key: []byte{0}, RangeEnd: []byte{0}, From: from, To: revs + 1, PrevKV: true, Limit: 1000})
		if err != nil || len(page.Events) != 1000 {
			b.Fatalf("history: %v", err)
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "events/s")
}
