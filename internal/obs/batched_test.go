package obs

import (
	"math"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// histogramOf gathers the one histogram that c collects.
func histogramOf(t *testing.T, c prometheus.Collector) *dto.Histogram {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || len(families[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one histogram", families)
	}
	return families[0].GetMetric()[0].GetHistogram()
}

// TestBatchedHistogramMatchesPrometheus: flushed batches read exactly as prometheus.Histogram reads after the
// same observations, bucket edges included, and nothing unflushed is seen.
func TestBatchedHistogramMatchesPrometheus(t *testing.T) {
	buckets := []float64{0.001, 0.01, 0.1, 1}
	tests := []struct {
		name    string
		batches [][]float64
	}{
		{"none", nil},
		{"one batch", [][]float64{{0.0005, 0.001, 0.002, 0.5, 1, 3}}},
		{"edges and beyond", [][]float64{{0, 0.001}, {0.01, 0.1}, {1, 1.0001, 100}}},
		{"empty batches between", [][]float64{{}, {0.05}, {}, {0.05, 0.2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := prometheus.HistogramOpts{Name: "t_seconds", Help: "t", Buckets: buckets}
			want := prometheus.NewHistogram(opts)
			got := NewBatchedHistogram(opts)
			batch := got.NewBatch()
			for _, vs := range tt.batches {
				for _, v := range vs {
					want.Observe(v)
					batch.Observe(v)
				}
				if batch.Len() != len(vs) {
					t.Fatalf("batch holds %d, want %d", batch.Len(), len(vs))
				}
				batch.Flush()
				if batch.Len() != 0 {
					t.Fatalf("batch holds %d after Flush", batch.Len())
				}
			}
			compareHistograms(t, histogramOf(t, got), histogramOf(t, want))
		})
	}
}

func compareHistograms(t *testing.T, got, want *dto.Histogram) {
	t.Helper()
	// Sums are added in another order (batch by batch), so they may differ in the last bits.
	if got.GetSampleCount() != want.GetSampleCount() || math.Abs(got.GetSampleSum()-want.GetSampleSum()) > 1e-9 {
		t.Fatalf("count %d sum %v, want %d %v", got.GetSampleCount(), got.GetSampleSum(), want.GetSampleCount(),
			want.GetSampleSum())
	}
	gb, wb := got.GetBucket(), want.GetBucket()
	if len(gb) != len(wb) {
		t.Fatalf("%d buckets, want %d", len(gb), len(wb))
	}
	for i := range wb {
		if gb[i].GetUpperBound() != wb[i].GetUpperBound() || gb[i].GetCumulativeCount() != wb[i].GetCumulativeCount() {
			t.Errorf("bucket %d: le %v count %d, want le %v count %d", i, gb[i].GetUpperBound(),
				gb[i].GetCumulativeCount(), wb[i].GetUpperBound(), wb[i].GetCumulativeCount())
		}
	}
}

// TestBatchedHistogramObserveN: ObserveN(v, n) reads as n calls of Observe(v); n of 0 or less records nothing.
func TestBatchedHistogramObserveN(t *testing.T) {
	type obs struct {
		v float64
		n int
	}
	tests := []struct {
		name string
		obs  []obs
	}{
		{"one value many times", []obs{{0.05, 100}}},
		{"edges", []obs{{0.001, 3}, {1, 2}, {2, 5}}},
		{"none for zero or less", []obs{{0.5, 0}, {0.5, -3}, {0.2, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := prometheus.HistogramOpts{Name: "t_seconds", Help: "t", Buckets: []float64{0.001, 0.01, 0.1, 1}}
			want := prometheus.NewHistogram(opts)
			got := NewBatchedHistogram(opts)
			batch := got.NewBatch()
			total := 0
			for _, o := range tt.obs {
				for range o.n {
					want.Observe(o.v)
				}
				batch.ObserveN(o.v, o.n)
				total += max(o.n, 0)
			}
			if batch.Len() != total {
				t.Fatalf("batch holds %d, want %d", batch.Len(), total)
			}
			batch.Flush()
			compareHistograms(t, histogramOf(t, got), histogramOf(t, want))
		})
	}
}

// TestBatchedHistogramUnflushedIsNotSeen: a scrape sees flushed batches only; a zero batch records nothing.
func TestBatchedHistogramUnflushedIsNotSeen(t *testing.T) {
	h := NewBatchedHistogram(prometheus.HistogramOpts{Name: "t_seconds", Help: "t"})
	b := h.NewBatch()
	b.Observe(0.2)
	if n := histogramOf(t, h).GetSampleCount(); n != 0 {
		t.Fatalf("count %d before Flush, want 0", n)
	}
	b.Flush()
	var zero HistogramBatch
	zero.Observe(1)
	zero.Flush()
	if n := histogramOf(t, h).GetSampleCount(); n != 1 {
		t.Fatalf("count %d after Flush, want 1", n)
	}
}

// TestBatchedHistogramConcurrentBatches: batches of many goroutines flushed while scraping add up.
func TestBatchedHistogramConcurrentBatches(t *testing.T) {
	h := NewBatchedHistogram(prometheus.HistogramOpts{Name: "t_seconds", Help: "t", Buckets: []float64{1, 2}})
	const goroutines, each = 8, 1000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			b := h.NewBatch()
			for i := range each {
				b.Observe(float64(g % 3))
				if i%100 == 99 {
					b.Flush()
				}
			}
			b.Flush()
		})
	}
	for range 10 {
		histogramOf(t, h)
	}
	wg.Wait()
	got := histogramOf(t, h)
	if got.GetSampleCount() != goroutines*each {
		t.Fatalf("count %d, want %d", got.GetSampleCount(), goroutines*each)
	}
	// g%3 over g = 0..7: three 0s, three 1s, two 2s.
	if le1 := got.GetBucket()[0].GetCumulativeCount(); le1 != 6*each {
		t.Fatalf("le 1: %d, want %d", le1, 6*each)
	}
	if got.GetSampleSum() != float64((3+2*2)*each) {
		t.Fatalf("sum %v, want %v", got.GetSampleSum(), (3+2*2)*each)
	}
}
