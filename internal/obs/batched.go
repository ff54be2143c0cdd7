package obs

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// BatchedHistogram is a Prometheus histogram for a hot path that observes from many goroutines at once (a
// watch hub's senders, one observation per response written). Each goroutine counts into a HistogramBatch
// of its own, with no atomic operation and no cache line shared with another goroutine, and adds the batch to
// the histogram in one step (Flush) when it pauses. prometheus.Histogram instead does three atomic adds on
// lines every observer shares, which costs more than the bucket search and makes the observers contend as
// cores are added. A scrape sees what has been flushed: callers flush at least whenever they go idle.
type BatchedHistogram struct {
	desc  *prometheus.Desc
	upper []float64 // bucket upper bounds, ascending; +Inf is implicit

	mu     sync.Mutex
	counts []uint64 // per bucket, not cumulative; the last one is +Inf
	count  uint64
	sum    float64
}

// NewBatchedHistogram is a histogram with opts' name, help and buckets (prometheus.DefBuckets when none),
// without labels.
func NewBatchedHistogram(opts prometheus.HistogramOpts) *BatchedHistogram {
	upper := opts.Buckets
	if len(upper) == 0 {
		upper = prometheus.DefBuckets
	}
	upper = append([]float64(nil), upper...)
	sort.Float64s(upper)
	return &BatchedHistogram{
		desc: prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name), opts.Help,
			nil, opts.ConstLabels),
		upper:  upper,
		counts: make([]uint64, len(upper)+1),
	}
}

// Describe implements prometheus.Collector.
func (h *BatchedHistogram) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect implements prometheus.Collector: the observations flushed so far.
func (h *BatchedHistogram) Collect(ch chan<- prometheus.Metric) {
	buckets := make(map[float64]uint64, len(h.upper))
	h.mu.Lock()
	var cumulative uint64
	for i, le := range h.upper {
		cumulative += h.counts[i]
		buckets[le] = cumulative
	}
	count, sum := h.count, h.sum
	h.mu.Unlock()
	ch <- prometheus.MustNewConstHistogram(h.desc, count, sum, buckets)
}

// NewBatch is an empty batch for one goroutine's observations.
func (h *BatchedHistogram) NewBatch() HistogramBatch {
	return HistogramBatch{h: h, counts: make([]uint64, len(h.upper)+1)}
}

// HistogramBatch holds one goroutine's observations until Flush adds them to its histogram. It is not safe
// for concurrent use. The zero value records nothing.
type HistogramBatch struct {
	h      *BatchedHistogram
	counts []uint64
	n      uint64
	sum    float64
}

// Observe records v in the batch.
func (b *HistogramBatch) Observe(v float64) { b.ObserveN(v, 1) }

// ObserveN records n observations of v in the batch (n >= 0).
func (b *HistogramBatch) ObserveN(v float64, n int) {
	if b.h == nil || n <= 0 {
		return
	}
	upper := b.h.upper
	i := 0
	for i < len(upper) && v > upper[i] { // a handful of buckets: a linear search beats a binary one
		i++
	}
	b.counts[i] += uint64(n)
	b.n += uint64(n)
	b.sum += v * float64(n)
}

// Len is the number of observations not flushed yet.
func (b *HistogramBatch) Len() int { return int(b.n) }

// Flush adds the batch to its histogram and empties it.
func (b *HistogramBatch) Flush() {
	if b.n == 0 {
		return
	}
	h := b.h
	h.mu.Lock()
	for i, c := range b.counts {
		if c != 0 {
			h.counts[i] += c
			b.counts[i] = 0
		}
	}
	h.count += b.n
	h.sum += b.sum
	h.mu.Unlock()
	b.n, b.sum = 0, 0
}
